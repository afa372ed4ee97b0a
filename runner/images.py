"""Guest images: build from Debian packages, record by archive digest, verify the extracted tree.

An image is a docker-save archive (its sha256 is the digest smolvm keys on) plus a read-only
extracted rootfs keyed by that digest, which the namespace engine binds. The archive is the
root of trust: `verify` re-derives the expected tree from it and compares path by path.

A recipe (images/<name>/recipe.toml) names Debian packages, and may prune some that Debian makes
a dependency but nothing in the image uses; files under images/<name>/rootfs/ are laid over the
installed tree. Both are part of the recipe's hash, so changing either rebuilds the image.

Two lock files, one format. The host's record ($CORDON_IMAGES_DIR/built.json) says what this
host built; runs resolve and verify images by it. The tracked images/lock.json is the reference
pin: a build compares with it and says whether it reproduced it, but only `images pin`, a
deliberate developer action, writes it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from runner.config import PIN_PATH, PROJECT_ROOT, RECIPES_DIR, Paths, paths_from_env

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
_CHUNK = 1 << 20

Log = Callable[[str], None]


class ImageError(RuntimeError):
    """A recipe, build or verification problem, with a message meant for the operator."""


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


def load_recipe(name: str, recipes_dir: Path = RECIPES_DIR) -> Recipe:
    path = recipes_dir / name / "recipe.toml"
    if not path.is_file():
        known = ", ".join(recipe_names(recipes_dir)) or "none"
        raise ImageError(f"no image recipe named {name!r} (known: {known})")
    raw = path.read_bytes()
    overlay = _load_overlay(path.parent / OVERLAY_DIR)
    try:
        data = tomllib.loads(raw.decode())
        recipe = Recipe(
            name=name,
            suite=str(data["suite"]),
            variant=str(data.get("variant", "essential")),
            packages=tuple(str(p) for p in data["packages"]),
            source_date_epoch=int(data["source_date_epoch"]),
            command=tuple(str(c) for c in data["command"]),
            sha256=_recipe_sha256(raw, overlay),
            prune=tuple(str(p) for p in data.get("prune", ())),
            overlay=overlay,
        )
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise ImageError(f"{path}: malformed recipe: {exc}") from exc
    if not recipe.packages or not all(_is_package_name(p) for p in recipe.packages):
        raise ImageError(f"{path}: packages must be a non-empty list of Debian package names")
    if not all(_is_package_name(p) for p in recipe.prune) or set(recipe.prune) & set(recipe.packages):
        raise ImageError(f"{path}: prune must list Debian package names that packages does not")
    return recipe


def _load_overlay(root: Path) -> tuple[OverlayFile, ...]:
    """The files under images/<name>/rootfs/, in a fixed order: regular files and directories only
    (a link could point the build anywhere on the host)."""
    if not root.is_dir():
        return ()
    files = []
    for path in _walk(root):
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"{path}: an image overlay holds regular files and directories only")
        files.append(OverlayFile(str(path.relative_to(root)), path.read_bytes(), bool(st.st_mode & 0o111)))
    return tuple(files)


def _recipe_sha256(raw: bytes, overlay: tuple[OverlayFile, ...]) -> str:
    digest = hashlib.sha256(BUILDER_VERSION.encode() + b"\0" + raw)
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
    _write_images(path, {name: entry.to_json() for name, entry in entries.items()})


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


def _write_images(path: Path, images: Mapping[str, dict[str, Any]]) -> None:
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


# --- the store ------------------------------------------------------------------------


class ImageStore:
    """Builds, finds and verifies images under the images directory, recorded in the host's
    record there; compares builds with the tracked pin and, when told to, pins them."""

    def __init__(self, paths: Paths, *, recipes_dir: Path = RECIPES_DIR, pin_path: Path = PIN_PATH):
        self.paths = paths
        self.recipes_dir = recipes_dir
        self.pin_path = pin_path

    @property
    def record_path(self) -> Path:
        return self.paths.image_record

    def archive_path(self, digest: str) -> Path:
        return self.paths.archives_dir / f"{digest_hex(digest)}.tar"

    def rootfs_path(self, digest: str) -> Path:
        return self.paths.rootfs_dir / digest_hex(digest)

    def built(self) -> dict[str, LockEntry]:
        """What this host built, by image name."""
        return read_lock(self.record_path)

    def pinned(self) -> dict[str, LockEntry]:
        return read_lock(self.pin_path)

    def resolve(self, name: str) -> ImageRef:
        """The image `name` this host built, which must be present (not re-verified here)."""
        entry = self.built().get(name)
        if entry is None:
            raise ImageError(f"image {name!r} is not built on this host (not in {self.record_path}); run `make images`")
        ref = ImageRef(name, entry.digest, self.archive_path(entry.digest), self.rootfs_path(entry.digest))
        if not ref.archive.is_file() or not ref.rootfs.is_dir():
            raise ImageError(f"image {name!r} ({entry.digest}) is not built on this host; run `make images`")
        return ref

    # build

    def build(self, names: list[str], *, force: bool = False, jobs: int = 2, log: Log = print) -> list[BuildResult]:
        """Build what is not up to date, record it in the host's record, and compare each image
        with the pin. Never writes the pin."""
        recipes = [load_recipe(n, self.recipes_dir) for n in names]
        with self._exclusive():
            record = read_record(self.record_path)
            self._adopt_legacy_builds([r for r in recipes if r.name not in record], record, log)
            todo = [r for r in recipes if force or not self._up_to_date(r, record.get(r.name))]
            for recipe in recipes:
                if recipe not in todo:
                    log(f"{recipe.name}: up to date ({record[recipe.name].entry.digest})")
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                # Each build is recorded as it finishes, so one failing does not lose another.
                built = pool.map(lambda r: self._build_one(r, log), todo)
                for recipe, (digest, packages) in zip(todo, built, strict=True):
                    record[recipe.name] = self._recorded(recipe, digest, packages, record.get(recipe.name))
                    self._save_record(record)
                    self._legacy_stamp(recipe.name).unlink(missing_ok=True)
        pins = self.pinned()
        results = [
            self._compare_with_pin(r.name, record[r.name].entry, pins.get(r.name), skipped=r not in todo, log=log)
            for r in recipes
        ]
        return sorted(results, key=lambda r: r.name)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.paths.images_dir.mkdir(parents=True, exist_ok=True)
        with open(self.paths.images_dir / ".build.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _up_to_date(self, recipe: Recipe, built: BuiltImage | None) -> bool:
        if built is None or built.entry.recipe_sha256 != recipe.sha256:
            return False
        try:
            st = self.archive_path(built.entry.digest).stat()
        except FileNotFoundError:
            return False
        unchanged = (built.archive_size, built.archive_mtime_ns) == (st.st_size, st.st_mtime_ns)
        return unchanged and self.rootfs_path(built.entry.digest).is_dir()

    def _recorded(self, recipe: Recipe, digest: str, packages: tuple[str, ...], old: BuiltImage | None) -> BuiltImage:
        built_at = old.entry.built_at if old is not None and old.entry.digest == digest else _now_iso()
        st = self.archive_path(digest).stat()
        return BuiltImage(LockEntry(digest, recipe.sha256, built_at, packages), st.st_size, st.st_mtime_ns)

    def _compare_with_pin(
        self, name: str, built: LockEntry, pin: LockEntry | None, *, skipped: bool, log: Log
    ) -> BuildResult:
        pin_file = _shown(self.pin_path)
        pin_it = f"`python -m runner images pin {name}`, then commit {pin_file}"
        if pin is None or pin.recipe_sha256 != built.recipe_sha256:
            what = "no build of this recipe" if pin is None else "a build of an older recipe"
            log(f"{name}: {pin_file} pins {what}; this host built {built.digest}\n{name}:   to pin it: {pin_it}")
            return BuildResult(name, built.digest, skipped, 0.0, None, (), None if pin is None else pin.digest)
        if pin.digest == built.digest:
            log(f"{name}: reproduces the digest pinned in {pin_file}")
            return BuildResult(name, built.digest, skipped, 0.0, True, (), pin.digest)
        changes = package_changes(pin.packages, built.packages)
        log(
            f"{name}: WARNING: does not reproduce the digest pinned in {pin_file} (Debian published updates?)\n"
            f"{name}:   pinned {pin.digest}\n"
            f"{name}:   built  {built.digest}, which runs on this host use and record\n"
            f"{name}:   packages (pinned -> built): {', '.join(changes) or 'the same; file contents differ'}\n"
            f"{name}:   if this build should be the pin (a deliberate choice): {pin_it}"
        )
        return BuildResult(name, built.digest, skipped, 0.0, False, changes, pin.digest)

    def _legacy_stamp(self, name: str) -> Path:
        return self.paths.images_dir / f"{name}.build.json"

    def _save_record(self, record: dict[str, BuiltImage]) -> None:
        _write_images(self.record_path, {name: built.to_json() for name, built in record.items()})

    def _adopt_legacy_builds(self, recipes: list[Recipe], record: dict[str, BuiltImage], log: Log) -> None:
        """Cordon once recorded a build only by a `<name>.build.json` stamp and by rewriting the
        tracked lock. Adopt such a build into the host's record, once, when its archive still
        hashes to the stamped digest, rather than rebuild it; its packages come from its rootfs."""
        adopted = {r.name: built for r in recipes if (built := self._legacy_build(r)) is not None}
        if not adopted:
            return
        record.update(adopted)
        self._save_record(record)
        for name, built in adopted.items():
            self._legacy_stamp(name).unlink()
            log(f"{name}: recorded the earlier build {built.entry.digest} in {self.record_path}")

    def _legacy_build(self, recipe: Recipe) -> BuiltImage | None:
        try:
            stamp = json.loads(self._legacy_stamp(recipe.name).read_text())
            digest = str(stamp["digest"])
            archive, rootfs = self.archive_path(digest), self.rootfs_path(digest)
            st = archive.stat()
        except (OSError, ValueError, KeyError, TypeError, ImageError):
            return None
        if (
            stamp.get("recipe_sha256") != recipe.sha256
            or (stamp.get("archive_size"), stamp.get("archive_mtime_ns")) != (st.st_size, st.st_mtime_ns)
            or not (rootfs / "var/lib/dpkg/status").is_file()
            or f"sha256:{_sha256_file(archive)}" != digest
        ):
            return None
        entry = LockEntry(digest, recipe.sha256, _iso(st.st_mtime), _package_manifest(rootfs))
        return BuiltImage(entry, st.st_size, st.st_mtime_ns)

    def _build_one(self, recipe: Recipe, log: Log) -> tuple[str, tuple[str, ...]]:
        started = time.monotonic()
        work = self.paths.build_dir / f"{recipe.name}-{os.getpid()}"
        if work.exists():
            _rmtree(work)
        work.mkdir(parents=True)
        try:
            tree = work / "rootfs"
            log(f"{recipe.name}: mmdebstrap {recipe.suite} {' '.join(recipe.packages)}")
            _mmdebstrap(recipe, tree, work / "mmdebstrap.log")
            if recipe.prune:
                pruned = _prune(recipe, tree, work / "prune.log")
                log(f"{recipe.name}: pruned {len(pruned)} packages: {' '.join(pruned)}")
            packages = _package_manifest(tree)
            _replace_host_files(tree)
            _lay_overlay(recipe, tree)
            _byte_compile_overlay(recipe, tree, work / "compile.log")
            _finish_tree(tree, recipe.source_date_epoch)
            archive_tmp = work / "image.tar"
            digest = _write_archive(recipe, tree, work, archive_tmp)
            self.paths.archives_dir.mkdir(parents=True, exist_ok=True)
            self.paths.rootfs_dir.mkdir(parents=True, exist_ok=True)
            rootfs = self.rootfs_path(digest)
            if rootfs.exists():
                _rmtree(rootfs)  # a partial or tampered tree of the same digest; ours is fresh
            tree.rename(rootfs)
            os.chmod(rootfs, 0o755)  # noqa: S103 - the image is meant to be world-readable
            archive_tmp.replace(self.archive_path(digest))
            log(f"{recipe.name}: built {digest} in {time.monotonic() - started:.0f} s")
            return digest, packages
        finally:
            _rmtree(work)

    # pin

    def pin(self, names: list[str], *, log: Log = print) -> list[PinResult]:
        """Make this host's builds of `names` the reference pin: the one command that writes the
        tracked lock, for a developer who decided the new digests are wanted. Each archive is
        re-hashed first, so a pin names an archive that exists and matches it."""
        recipes = [load_recipe(n, self.recipes_dir) for n in names]
        with self._exclusive():
            built, pins = self.built(), self.pinned()
            results = []
            for recipe in recipes:
                entry = built.get(recipe.name)
                if entry is None or entry.recipe_sha256 != recipe.sha256:
                    raise ImageError(
                        f"{recipe.name}: this host has no build of the current recipe to pin; "
                        f"run `python -m runner images build {recipe.name}` first"
                    )
                archive = self.archive_path(entry.digest)
                if not archive.is_file() or f"sha256:{_sha256_file(archive)}" != entry.digest:
                    raise ImageError(f"{recipe.name}: the archive of {entry.digest} is missing or altered; rebuild it")
                old = pins.get(recipe.name)
                result = PinResult(recipe.name, entry.digest, None if old is None else old.digest)
                if result.changed or old is None or old.recipe_sha256 != entry.recipe_sha256:
                    pins[recipe.name] = entry
                    changes = ", ".join(package_changes(old.packages, entry.packages)) if old else "new pin"
                    log(f"{recipe.name}: pinning {entry.digest} (was {result.previous}; {changes or 'same packages'})")
                results.append(result)
            if pins != self.pinned():
                write_lock(pins, self.pin_path)
                log(f"wrote {_shown(self.pin_path)}; review and commit it")
        return results

    # verify

    def verified_stamp(self, digest: str) -> Path:
        return self.paths.rootfs_dir / f"{digest_hex(digest)}.verified"

    def recently_verified(self, ref: ImageRef, max_age_s: float = 3600.0) -> bool:
        """Whether a full verification of this image passed within `max_age_s` (runs skip it then):
        the stamp's time, or this process's own memory of it where the stamp cannot be written."""
        try:
            stamped = self.verified_stamp(ref.digest).stat().st_mtime
        except FileNotFoundError:
            stamped = 0.0
        return time.time() - max(stamped, _VERIFIED_HERE.get(ref.digest, 0.0)) < max_age_s

    def verify(self, name: str) -> VerifyReport:
        entry = self.built().get(name)
        if entry is None:
            return VerifyReport(name, None, [f"{name}: not built on this host (not in {self.record_path})"])
        report = VerifyReport(name, entry.digest)
        archive, rootfs = self.archive_path(entry.digest), self.rootfs_path(entry.digest)
        if not archive.is_file():
            report.problems.append(f"archive missing: {archive}")
            return report
        expected, actual_digest = _manifest_from_archive(archive)
        if actual_digest != entry.digest:
            report.problems.append(f"archive digest is {actual_digest}, this host's record says {entry.digest}")
        if not rootfs.is_dir():
            report.problems.append(f"extracted rootfs missing: {rootfs}")
            return report
        actual = _manifest_from_tree(rootfs)
        report.files_checked = len(actual)
        report.problems.extend(_compare(expected, actual))
        stamp = self.verified_stamp(entry.digest)
        try:
            if report.ok:
                _VERIFIED_HERE[entry.digest] = time.time()
                stamp.touch()
            else:
                _VERIFIED_HERE.pop(entry.digest, None)
                stamp.unlink(missing_ok=True)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            # Images shared read-only (several workers on one machine): remembered by this process.
        return report


# Digests this process verified, and when: where the stamp cannot be written (a read-only images dir).
_VERIFIED_HERE: dict[str, float] = {}


# --- building -------------------------------------------------------------------------


def _mmdebstrap(recipe: Recipe, target: Path, log_path: Path) -> None:
    argv = [
        "mmdebstrap",
        f"--variant={recipe.variant}",
        "--mode=root",
        "--format=directory",
        f"--hook-dir={MMDEBSTRAP_MERGED_USR_HOOK}",
        '--aptopt=Apt::Install-Recommends "false"',
        *(f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES),
        f"--include={','.join(recipe.packages)}",
        recipe.suite,
        str(target),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(recipe.source_date_epoch)}
    with open(log_path, "wb") as log:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageError(f"{recipe.name}: mmdebstrap failed with status {proc.returncode}:\n{tail}")


def _prune(recipe: Recipe, tree: Path, log_path: Path) -> list[str]:
    """Remove the recipe's pruned packages and whatever was installed only for them; return what
    was removed. Debian declares some build tools as run-time dependencies (python3-scipy depends
    on the pythran compiler, which brings g++, Boost's headers and a BLAS for development): dpkg
    removes them with --force-depends, so the image's package database records their absence."""
    installed = _dependency_graph(tree)
    missing = sorted(set(recipe.prune) - set(installed))
    if missing:
        raise ImageError(f"{recipe.name}: the recipe prunes {', '.join(missing)}, which the build did not install")
    essential = {name for name, pkg in installed.items() if pkg.essential}
    if essential & set(recipe.prune):
        raise ImageError(
            f"{recipe.name}: the recipe prunes essential packages: {', '.join(essential & set(recipe.prune))}"
        )
    roots = set(recipe.packages) | essential
    remove = sorted(set(installed) - _needed(roots, installed, excluded=set(recipe.prune)))
    argv = ["chroot", str(tree), "dpkg", "--purge", "--force-depends", *remove]
    env = {"PATH": GUEST_PATH, "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
           "SOURCE_DATE_EPOCH": str(recipe.source_date_epoch)}  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageError(f"{recipe.name}: removing pruned packages failed with status {proc.returncode}:\n{tail}")
    for name in UNREPRODUCIBLE_FILES:
        (tree / name).unlink(missing_ok=True)
    return remove


@dataclass(frozen=True)
class _Package:
    essential: bool
    depends: tuple[tuple[str, ...], ...]  # each a group of alternatives


def _dependency_graph(tree: Path) -> dict[str, _Package]:
    """The installed packages' dependencies (Depends and Pre-Depends), virtual names resolved to
    the installed packages that provide them; versions are not needed (the tree is consistent)."""
    fmt = "${db:Status-Abbrev}\t${Package}\t${Essential}\t${Provides}\t${Pre-Depends}, ${Depends}\n"
    out = subprocess.run(
        ["dpkg-query", f"--admindir={tree / 'var/lib/dpkg'}", "-W", "-f", fmt],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = [line.split("\t")[1:] for line in out.splitlines() if line.startswith("ii")]
    providers: dict[str, list[str]] = {name: [name] for name, *_ in rows}  # a real package first
    for name, _, provides, _ in rows:
        for virtual in _names(provides):
            providers.setdefault(virtual, []).append(name)
    graph = {}
    for name, essential, _, depends in rows:
        groups = tuple(
            tuple(p for alternative in group.split("|") for p in providers.get(_names(alternative)[0], []))
            for group in depends.split(",")
            if group.strip()
        )
        graph[name] = _Package(essential == "yes", groups)
    return graph


def _names(field: str) -> list[str]:
    """Package names from a dependency-style field ("a (>= 1), b:any" -> ["a", "b"])."""
    return [item.split()[0].split(":")[0] for item in field.split(",") if item.strip()]


def _needed(roots: set[str], graph: Mapping[str, _Package], *, excluded: set[str]) -> set[str]:
    """Every package the roots need, each group of alternatives met by its first installed,
    non-excluded choice (the one apt chose); a group left with no choice is what the prune breaks."""
    needed: set[str] = set()
    todo = [name for name in roots if name in graph]
    while todo:
        name = todo.pop()
        if name in needed or name in excluded:
            continue
        needed.add(name)
        for group in graph[name].depends:
            choice = next((p for p in group if p not in excluded), None)
            if choice is not None:
                todo.append(choice)
    return needed


def _replace_host_files(tree: Path) -> None:
    for name, content in HOST_FILES.items():
        path = tree / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_bytes(content)


def _lay_overlay(recipe: Recipe, tree: Path) -> None:
    """Write the recipe's overlay files into the tree. Each lands in a real directory of the tree
    and replaces a regular file or a link (the link itself: nothing is written through one)."""
    for f in recipe.overlay:
        target = tree / f.path
        for parent in reversed(target.relative_to(tree).parents[:-1]):
            where = tree / parent
            if where.is_symlink() or (where.exists() and not where.is_dir()):
                raise ImageError(f"{recipe.name}: overlay file /{f.path}: /{parent} is not a directory in the image")
            where.mkdir(exist_ok=True)
        if target.exists() and not target.is_symlink() and not target.is_file():
            raise ImageError(f"{recipe.name}: overlay file /{f.path} would replace a directory")
        target.unlink(missing_ok=True)
        target.write_bytes(f.data)
        os.chmod(target, 0o755 if f.executable else 0o644)


def _byte_compile_overlay(recipe: Recipe, tree: Path, log_path: Path) -> None:
    """Byte-compile the overlay's Python files with the image's own python3 into checked-hash
    .pyc files, as Debian's py3compile does for its packages (a read-only image can never cache
    them, so an uncompiled module would be compiled again by every program that imports it)."""
    sources = [f"/{f.path}" for f in recipe.overlay if f.path.endswith(".py")]
    if not sources:
        return
    code = (
        "import py_compile, sys\n"
        "for path in sys.argv[1:]:\n"
        "    py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)\n"
    )
    # -I -S -B: no site (neither the overlay's hook nor a .pth runs), and no other .pyc is written.
    argv = ["chroot", str(tree), "/usr/bin/python3", "-I", "-S", "-B", "-c", code, *sources]
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env={"PATH": GUEST_PATH}
        )
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageError(f"{recipe.name}: byte-compiling the overlay failed with status {proc.returncode}:\n{tail}")


def _package_manifest(tree: Path) -> tuple[str, ...]:
    out = subprocess.run(
        ["dpkg-query", f"--admindir={tree / 'var/lib/dpkg'}", "-W", "-f", "${Package}=${Version}\n"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return tuple(sorted(line for line in out.splitlines() if line))


def _finish_tree(tree: Path, epoch: int) -> None:
    """Make the tree safe to share read-only: root-owned, no devices, no setuid, world-readable,
    nothing group- or world-writable, fixed times."""
    dev = tree / "dev"
    if dev.exists():
        _rmtree(dev)
    for mount_point in MOUNT_POINTS:
        (tree / mount_point).mkdir(exist_ok=True)
    for path in _walk(tree):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            pass
        elif stat.S_ISDIR(st.st_mode):
            os.chmod(path, 0o755)  # noqa: S103 - world-readable, writable by root only
        elif stat.S_ISREG(st.st_mode):
            os.chmod(path, 0o755 if st.st_mode & 0o111 else 0o644)
        else:
            path.unlink()  # sockets, FIFOs or device nodes left by maintainer scripts
            continue
        os.lchown(path, 0, 0)
        os.utime(path, (epoch, epoch), follow_symlinks=False)
    os.utime(tree, (epoch, epoch))


def _walk(root: Path) -> Iterator[Path]:
    """Every path below root in a fixed order (sorted, parents first), never following links."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            yield base / name


def _write_archive(recipe: Recipe, tree: Path, work: Path, out: Path) -> str:
    """Write a docker-save archive of `tree` deterministically; return its digest."""
    epoch = recipe.source_date_epoch
    layer = work / "layer.tar"
    with tarfile.open(layer, "w", format=tarfile.GNU_FORMAT) as tar:
        seen_inodes: dict[tuple[int, int], str] = {}
        for path in _walk(tree):
            info = _tarinfo(path, tree, epoch, seen_inodes)
            if info.isreg():
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    layer_hex = _sha256_file(layer)
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": _oci_arch(),
        "os": "linux",
        "created": created,
        "config": {"Env": [f"PATH={GUEST_PATH}", "LANG=C.UTF-8"], "Cmd": list(recipe.command), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_hex}"]},
        "history": [{"created": created, "created_by": f"cordon images build {recipe.name} ({recipe.suite})"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [
        {"Config": config_name, "RepoTags": [f"cordon/{recipe.name}:latest"], "Layers": [f"{layer_hex}/layer.tar"]}
    ]
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        _add_bytes(tar, "manifest.json", manifest_bytes, epoch)
        _add_bytes(tar, config_name, config_bytes, epoch)
        info = tarfile.TarInfo(f"{layer_hex}/layer.tar")
        info.size, info.mtime, info.mode = layer.stat().st_size, epoch, 0o644
        with open(layer, "rb") as handle:
            tar.addfile(info, handle)
    layer.unlink()
    return f"sha256:{_sha256_file(out)}"


def _tarinfo(path: Path, tree: Path, epoch: int, seen_inodes: dict[tuple[int, int], str]) -> tarfile.TarInfo:
    st = path.lstat()
    info = tarfile.TarInfo(str(path.relative_to(tree)))
    info.mode, info.uid, info.gid, info.mtime = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, epoch
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in seen_inodes:
            info.type, info.linkname = tarfile.LNKTYPE, seen_inodes[key]
        else:
            seen_inodes[key] = info.name
            info.size = st.st_size
    else:
        raise ImageError(f"unexpected special file in image tree: {info.name}")
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), epoch, 0o644
    tar.addfile(info, io.BytesIO(data))


def _oci_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


# --- verifying ------------------------------------------------------------------------

# path -> (kind, mode, uid, gid, size, sha256 or link target)
Manifest = dict[str, tuple[str, int, int, int, int, str]]


class _HashingReader:
    def __init__(self, raw: IO[bytes]):
        self.raw, self.hash = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        return data


def _manifest_from_archive(archive: Path) -> tuple[Manifest, str]:
    """The tree the archive describes, and the archive's own digest, in one pass."""
    layers: dict[str, Manifest] = {}
    wanted: list[str] = []
    with open(archive, "rb") as raw:
        reader = _HashingReader(raw)
        with tarfile.open(fileobj=reader, mode="r|") as outer:  # type: ignore[call-overload]
            for member in outer:
                if member.name == "manifest.json":
                    wanted = json.loads(_member_stream(outer, member).read())[0]["Layers"]
                elif member.name.endswith("/layer.tar") and member.isfile():
                    layers[member.name] = _manifest_from_layer(_member_stream(outer, member))
        while reader.read(_CHUNK):
            pass
    if len(wanted) != 1 or wanted[0] not in layers:
        raise ImageError(f"{archive}: not a single-layer Cordon image archive")
    return layers[wanted[0]], f"sha256:{reader.hash.hexdigest()}"


def _manifest_from_layer(stream: IO[bytes]) -> Manifest:
    manifest: Manifest = {}
    with tarfile.open(fileobj=stream, mode="r|") as layer:
        for m in layer:
            name = m.name.rstrip("/")
            if m.isdir():
                manifest[name] = ("dir", m.mode, m.uid, m.gid, 0, "")
            elif m.issym():
                manifest[name] = ("symlink", m.mode, m.uid, m.gid, 0, m.linkname)
            elif m.islnk():
                manifest[name] = manifest[m.linkname]
            elif m.isfile():
                manifest[name] = ("file", m.mode, m.uid, m.gid, m.size, _sha256_stream(_member_stream(layer, m)))
            else:
                raise ImageError(f"unexpected member type in image layer: {name}")
    return manifest


def _member_stream(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    stream = tar.extractfile(member)
    if stream is None:
        raise ImageError(f"image archive member {member.name} has no content")
    return stream


def _manifest_from_tree(root: Path) -> Manifest:
    manifest: Manifest = {}
    for path in _walk(root):
        st = path.lstat()
        name = str(path.relative_to(root))
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            manifest[name] = ("dir", mode, st.st_uid, st.st_gid, 0, "")
        elif stat.S_ISLNK(st.st_mode):
            manifest[name] = ("symlink", mode, st.st_uid, st.st_gid, 0, os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                digest = _sha256_stream(handle)
            manifest[name] = ("file", mode, st.st_uid, st.st_gid, st.st_size, digest)
        else:
            manifest[name] = ("special", mode, st.st_uid, st.st_gid, 0, "")
    return manifest


_FIELDS = ("type", "mode", "uid", "gid", "size", "content")


def _compare(expected: Manifest, actual: Manifest) -> list[str]:
    problems: list[str] = []
    for name in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(name), actual.get(name)
        if got is None:
            problems.append(f"missing: /{name}")
        elif want is None:
            problems.append(f"unexpected: /{name}")
        elif want != got:
            diffs = [f for f, a, b in zip(_FIELDS, want, got, strict=True) if a != b]
            problems.append(f"modified: /{name} ({', '.join(diffs)} differ)")
    return problems


# --- small helpers --------------------------------------------------------------------


def _sha256_stream(handle: IO[bytes]) -> str:
    # Every stream hashed here is buffered (open, fdopen, a tar member), so it has the readinto
    # that file_digest reads with; typing.IO does not declare it.
    return hashlib.file_digest(handle, "sha256").hexdigest()  # type: ignore[arg-type]


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return _sha256_stream(handle)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=False)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_iso() -> str:
    return _iso(time.time())


def _shown(path: Path) -> str:
    """A path as an operator in the checkout would type it."""
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)
