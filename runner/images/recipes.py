"""Image recipes (images/<name>/recipe.toml and its rootfs overlay), the lock files that
record builds (the host's built.json and the tracked pin, images/lock.json), and the types
they are read into."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from packaging.utils import canonicalize_name

from runner.config import PROJECT_ROOT, RECIPES_DIR, paths_from_env
from runner.spec import RUNTIMES

# Bump when the build procedure changes what ends up in the archive, so old builds are redone.
# (3: the build host's /etc/resolv.conf and /etc/hostname no longer end up in an image.)
BUILDER_VERSION = "3"

MMDEBSTRAP_MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# Mount points the engines bind over; they must exist in a read-only rootfs.
MOUNT_POINTS = ("input", "output", "tmp", "proc", "dev", "sys")
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# mmdebstrap copies the build host's /etc/resolv.conf and /etc/hostname into the tree (for apt's
# network access). Neither belongs in an image: a guest has no network, and the host's resolver
# address and name would make the digest depend on the machine that built it.
HOST_FILES = {"etc/resolv.conf": b"", "etc/hostname": b"sandbox\n"}
# Files mmdebstrap removes after its own install because they record when and where it ran; a
# prune writes them again.
UNREPRODUCIBLE_FILES = (
    "var/log/dpkg.log", "var/log/alternatives.log", "var/log/apt/history.log", "var/log/apt/term.log",
    "var/log/apt/eipp.log.xz", "var/cache/ldconfig/aux-cache",
)  # fmt: skip
OVERLAY_DIR = "rootfs"  # images/<name>/rootfs/: files laid over the installed tree
CHUNK = 1 << 20

Log = Callable[[str], None]


class ImageError(RuntimeError):
    """A recipe, build or verification problem, with a message meant for the operator."""


_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)(?P<rest>.*)$")
_HASH = re.compile(r"^--hash=sha256:(?P<hex>[0-9a-f]{64})$")
MAX_LINES = 500


@dataclass(frozen=True)
class Requirement:
    name: str  # canonical (PEP 503)
    version: str
    hashes: tuple[str, ...]  # sha256 hex
    line: int  # where it starts in its file, for messages
    source: str = "requirements.txt"  # its file, as an operator in the checkout names it

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def where(self) -> str:
        return f"{self.source}, line {self.line}"


def parse_requirements(text: str, source: str) -> tuple[Requirement, ...]:
    """The requirements of a file that pins each to one version with sha256 hashes; anything else
    (an option, an include, a URL or path, a marker, an extra, a line without a hash) is refused
    with its line number."""
    requirements: list[Requirement] = []
    seen: dict[str, int] = {}
    for number, logical in _logical_lines(text):
        where = f"{source}, line {number}"
        if ";" in logical:
            raise ImageError(f"{where}: environment markers (`;`) are not accepted: an image has one platform")
        if logical.startswith("-"):
            raise ImageError(f"{where}: options are not accepted ({logical.split()[0]}); "
                             "each line is `name==version --hash=sha256:<hex>`")  # fmt: skip
        match = _LINE.match(logical)
        if match is None:
            raise ImageError(
                f"{where}: {logical.split()[0]!r} is not pinned to one version with `==` "
                "(a URL, path, extra, marker or range is not accepted either)"
            )
        name, version = canonicalize_name(match["name"]), match["version"]
        hashes = []
        for option in match["rest"].split():
            hashed = _HASH.match(option)
            if hashed is None:
                raise ImageError(f"{where}: {option!r} is not a `--hash=sha256:<64 hex digits>`")
            hashes.append(hashed["hex"])
        if not hashes:
            raise ImageError(
                f"{where}: {name}=={version} has no --hash=sha256:...; a build installs only files whose hash "
                "the recipe names (`pip hash FILE` prints one)"
            )
        if name in seen:
            raise ImageError(f"{where}: {name} is already required on line {seen[name]}")
        seen[name] = number
        requirements.append(Requirement(name, version, tuple(hashes), number, source))
    if len(requirements) > MAX_LINES:
        raise ImageError(f"{source}: more than {MAX_LINES} requirements")
    return tuple(requirements)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, the line with its continuations joined and comments dropped): pip's
    syntax, where a `#` at a line's start or after a space begins a comment."""
    lines: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        content = re.sub(r"(^|\s)#.*$", "", raw)
        if not parts:
            start = number
        continued = content.rstrip().endswith("\\")
        parts.append(content.rstrip().removesuffix("\\").strip())
        if not continued:
            logical = " ".join(p for p in parts if p)
            if logical:
                lines.append((start, logical))
            parts = []
    if parts and any(parts):
        lines.append((start, " ".join(p for p in parts if p)))
    return lines


@dataclass(frozen=True)
class OverlayFile:
    """A file from images/<name>/rootfs/, laid over the installed tree at `path` (relative)."""

    path: str
    data: bytes
    executable: bool


@dataclass(frozen=True)
class Recipe:
    name: str
    suite: str
    variant: str
    packages: tuple[str, ...]
    source_date_epoch: int
    command: tuple[str, ...]
    sha256: str
    # Installed as a dependency, then removed with whatever was installed only for them.
    prune: tuple[str, ...] = ()
    overlay: tuple[OverlayFile, ...] = ()
    # An environment: the language its programs are in (runner.spec.RUNTIMES), the recipe it extends
    # (whose packages, prune, overlay and wheels it has too), and its wheels (requirements.txt).
    runtime: str = ""
    base: str | None = None
    requirements: tuple[Requirement, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class LockEntry:
    """One image as a lock file describes it: the host's record or the reference pin."""

    digest: str
    recipe_sha256: str
    built_at: str
    packages: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "recipe_sha256": self.recipe_sha256,
            "built_at": self.built_at,
            "packages": list(self.packages),
        }


@dataclass(frozen=True)
class BuiltImage:
    """The host's record of one build: the entry, and its archive's size and mtime as written
    (a later build redoes it when they changed)."""

    entry: LockEntry
    archive_size: int | None
    archive_mtime_ns: int | None

    def to_json(self) -> dict[str, Any]:
        return {**self.entry.to_json(), "archive_size": self.archive_size, "archive_mtime_ns": self.archive_mtime_ns}


@dataclass(frozen=True)
class BuildResult:
    name: str
    digest: str
    skipped: bool
    seconds: float
    # None: the pin has no entry for this recipe (or one for an older recipe); True/False: this
    # host's build is (not) the pinned digest.
    reproduced: bool | None = None
    package_changes: tuple[str, ...] = ()
    pinned_digest: str | None = None


@dataclass(frozen=True)
class PinResult:
    name: str
    digest: str
    previous: str | None  # the digest pinned before, if any

    @property
    def changed(self) -> bool:
        return self.previous != self.digest


@dataclass
class VerifyReport:
    name: str
    digest: str | None
    problems: list[str] = field(default_factory=list)
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class ImageRef:
    """A locally built image, as an engine needs it."""

    name: str
    digest: str
    archive: Path
    rootfs: Path


# --- recipes and the lock files -------------------------------------------------------


def recipe_names(recipes_dir: Path = RECIPES_DIR) -> list[str]:
    return sorted(p.parent.name for p in recipes_dir.glob("*/recipe.toml"))


REQUIREMENTS_FILE = "requirements.txt"  # images/<name>/requirements.txt: its wheels, pinned by hash


def load_recipe(name: str, recipes_dir: Path = RECIPES_DIR, *, _extending: tuple[str, ...] = ()) -> Recipe:
    """The recipe `name`, with what its `base` recipe has folded in: the base's packages, prune,
    overlay (its own files laid over the base's) and wheels, and its suite, variant, epoch and
    command unless it says its own."""
    path = recipes_dir / name / "recipe.toml"
    if not path.is_file():
        known = ", ".join(recipe_names(recipes_dir)) or "none"
        raise ImageError(f"no image recipe named {name!r} (known: {known})")
    raw = path.read_bytes()
    overlay = _load_overlay(path.parent / OVERLAY_DIR)
    requirements_path = path.parent / REQUIREMENTS_FILE
    requirements_raw = requirements_path.read_bytes() if requirements_path.is_file() else b""
    try:
        data = tomllib.loads(raw.decode())
        base_name = data.get("base")
        if base_name is not None:
            if not isinstance(base_name, str) or base_name in (name, *_extending):
                raise ImageError(f"{path}: base {base_name!r} would make the recipe extend itself")
            base: Recipe | None = load_recipe(base_name, recipes_dir, _extending=(*_extending, name))
        else:
            base = None

        def own(key: str) -> Any:  # the recipe's own value, else its base's
            if key in data:
                return data[key]
            if base is not None:
                return getattr(base, key)
            raise KeyError(key)

        requirements = parse_requirements(requirements_raw.decode(), shown(requirements_path))
        recipe = Recipe(
            name=name,
            suite=str(own("suite")),
            variant=str(data.get("variant", base.variant if base else "essential")),
            packages=_joined(base.packages if base else (), tuple(str(p) for p in own("packages"))),
            source_date_epoch=int(own("source_date_epoch")),
            command=tuple(str(c) for c in own("command")),
            sha256=_recipe_sha256(
                raw + (b"\0" + requirements_raw if requirements_raw else b""), overlay, base.sha256 if base else ""
            ),
            prune=_joined(base.prune if base else (), tuple(str(p) for p in data.get("prune", ()))),
            overlay=_overlaid(base.overlay, overlay) if base else overlay,
            runtime=str(data.get("runtime", base.runtime if base else _runtime_of(name, own("command")))),
            base=base_name,
            requirements=_requirements_joined(base.requirements if base else (), requirements, path),
            description=str(data.get("description", "")),
        )
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ImageError(f"{path}: malformed recipe: {exc}") from exc
    if not recipe.packages or not all(_is_package_name(p) for p in recipe.packages):
        raise ImageError(f"{path}: packages must be a non-empty list of Debian package names")
    if not all(_is_package_name(p) for p in recipe.prune) or set(recipe.prune) & set(recipe.packages):
        raise ImageError(f"{path}: prune must list Debian package names that packages does not")
    if recipe.runtime not in RUNTIMES:
        raise ImageError(f"{path}: runtime must be one of {', '.join(RUNTIMES)} (the language its programs are in)")
    if recipe.requirements and recipe.runtime != "python":
        raise ImageError(f"{path}: only a python environment has wheels ({REQUIREMENTS_FILE})")
    return recipe


def _runtime_of(name: str, command: Any) -> str:
    """A recipe's runtime when it says none: its name's (python, node), else its command's."""
    if name in RUNTIMES:
        return name
    program = Path(str(command[0])).name if command else ""
    return next((r for r in RUNTIMES if program.startswith({"python": "python3", "node": "node"}[r])), "")


def _joined(first: tuple[str, ...], then: tuple[str, ...]) -> tuple[str, ...]:
    return (*first, *(p for p in then if p not in first))


def _overlaid(base: tuple[OverlayFile, ...], own: tuple[OverlayFile, ...]) -> tuple[OverlayFile, ...]:
    replaced = {f.path for f in own}
    return tuple(sorted((*(f for f in base if f.path not in replaced), *own), key=lambda f: f.path))


def _requirements_joined(
    base: tuple[Requirement, ...], own: tuple[Requirement, ...], path: Path
) -> tuple[Requirement, ...]:
    again = sorted({r.name for r in base} & {r.name for r in own})
    if again:
        raise ImageError(f"{path}: its base already requires {', '.join(again)}")
    return (*base, *own)


PYCACHE = "__pycache__"


def _load_overlay(root: Path) -> tuple[OverlayFile, ...]:
    """The files under images/<name>/rootfs/, in a fixed order: regular files and directories only
    (a link could point the build anywhere on the host). Bytecode a host's Python left beside the
    sources (__pycache__/, which git ignores) is not the recipe's: the build compiles its own, so a
    checkout where a tool imported an overlay module pins what a fresh clone builds."""
    if not root.is_dir():
        return ()
    files = []
    for path in walk(root):
        if PYCACHE in path.relative_to(root).parts:
            continue
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"{path}: an image overlay holds regular files and directories only")
        files.append(OverlayFile(str(path.relative_to(root)), path.read_bytes(), bool(st.st_mode & 0o111)))
    return tuple(files)


def _recipe_sha256(raw: bytes, overlay: tuple[OverlayFile, ...], base_sha256: str = "") -> str:
    digest = hashlib.sha256(BUILDER_VERSION.encode() + b"\0" + raw)
    if base_sha256:  # an environment changes with the recipe it extends
        digest.update(b"\0base\0" + base_sha256.encode())
    for f in overlay:  # what lands in the tree: path, executable bit, content
        digest.update(b"\0%s\0%d\0%s" % (f.path.encode(), f.executable, hashlib.sha256(f.data).digest()))
    return digest.hexdigest()


def _is_package_name(name: str) -> bool:
    return bool(name) and name[0].isalnum() and all(c.isalnum() or c in "+-." for c in name)


def read_lock(path: Path | None = None) -> dict[str, LockEntry]:
    """The images a lock file describes. By default this host's record of what it built (what
    runs use, from $CORDON_IMAGES_DIR); `read_lock(PIN_PATH)` reads the tracked reference pin."""
    path = paths_from_env().image_record if path is None else path
    return {name: _lock_entry(raw) for name, raw in _read_images(path).items()}


def write_lock(entries: Mapping[str, LockEntry], path: Path) -> None:
    write_images(path, {name: entry.to_json() for name, entry in entries.items()})


def read_record(path: Path) -> dict[str, BuiltImage]:
    return {
        name: BuiltImage(_lock_entry(raw), raw.get("archive_size"), raw.get("archive_mtime_ns"))
        for name, raw in _read_images(path).items()
    }


def _lock_entry(raw: dict[str, Any]) -> LockEntry:
    return LockEntry(
        digest=raw["digest"], recipe_sha256=raw["recipe_sha256"], built_at=raw["built_at"],
        packages=tuple(raw["packages"]),
    )  # fmt: skip


def _read_images(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    images: dict[str, dict[str, Any]] = json.loads(path.read_text()).get("images", {})
    return images


def write_images(path: Path, images: Mapping[str, dict[str, Any]]) -> None:
    """Replace the file whole: a reader sees the old content or the new, never a torn write."""
    body = json.dumps({"images": {name: images[name] for name in sorted(images)}}, indent=2) + "\n"
    tmp = path.with_suffix(".tmp")  # images/lock.tmp is ignored by git
    with open(tmp, "w") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def package_changes(pinned: Sequence[str], built: Sequence[str]) -> tuple[str, ...]:
    """Two `name=version` manifests' differences: `name old -> new`, `+name=version` (built
    only) and `-name=version` (pinned only)."""
    old = dict(p.split("=", 1) for p in pinned)
    new = dict(p.split("=", 1) for p in built)
    changes = []
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            changes.append(f"-{name}={old[name]}")
        elif name not in old:
            changes.append(f"+{name}={new[name]}")
        elif old[name] != new[name]:
            changes.append(f"{name} {old[name]} -> {new[name]}")
    return tuple(changes)


def digest_hex(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise ImageError(f"malformed image digest {digest!r}")
    return hexpart


# --- small helpers --------------------------------------------------------------------


def sha256_stream(handle: IO[bytes]) -> str:
    # Every stream hashed here is buffered (open, fdopen, a tar member), so it has the readinto
    # that file_digest reads with; typing.IO does not declare it.
    return hashlib.file_digest(handle, "sha256").hexdigest()  # type: ignore[arg-type]


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return sha256_stream(handle)


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=False)


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso() -> str:
    return iso(time.time())


def shown(path: Path) -> str:
    """A path as an operator in the checkout would type it."""
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def walk(root: Path) -> Iterator[Path]:
    """Every path below root in a fixed order (sorted, parents first), never following links."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            yield base / name
