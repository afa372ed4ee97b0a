"""An environment's Python wheels: a requirements file that pins every package to one version by
hash, wheels only, fetched for the image's own interpreter and platform and unpacked into its tree.

Nothing from a requirements file runs at build: the file is read by runner.images.recipes, not by pip (no
options, no includes, no URLs: `name==version --hash=sha256:...` lines only); pip only downloads,
with --only-binary=:all: and --require-hashes, one line at a time so that a refusal names its line;
and a wheel is unpacked by `installer` (a zip file laid out by its RECORD), never imported or built.
Every wheel must hash to one of its line's hashes and carry a tag the image's python accepts.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from runner.images.recipes import GUEST_PATH, ImageError, Requirement, sha256_file

SITE = "usr/local/lib/python{version}/dist-packages"  # on Debian's python3's sys.path, empty in its packages
PIP_TIMEOUT_S = 600


@dataclass(frozen=True)
class Interpreter:
    """What a wheel must suit: the image's python3 (version) and C library (glibc), and the machine."""

    major: int
    minor: int
    glibc: tuple[int, int]
    machine: str

    @property
    def site(self) -> str:
        return SITE.format(version=f"{self.major}.{self.minor}")

    def platforms(self) -> list[str]:
        legacy = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}
        tags = [f"manylinux_{self.glibc[0]}_{m}_{self.machine}" for m in range(self.glibc[1], 4, -1)]
        tags += [f"{name}_{self.machine}" for version, name in legacy.items() if version <= self.glibc]
        return tags

    def accepts(self, filename: str) -> bool:
        _, _, _, tags = parse_wheel_filename(filename)
        pythons = {f"cp{self.major}{self.minor}", f"py{self.major}{self.minor}", f"py{self.major}", f"cp{self.major}"}
        abis = {f"cp{self.major}{self.minor}", "abi3", "none"}
        platforms = {*self.platforms(), "any"}
        return any(t.interpreter in pythons and t.abi in abis and t.platform in platforms for t in tags)

    def describe(self) -> str:
        return f"cp{self.major}{self.minor}, manylinux_{self.glibc[0]}_{self.glibc[1]}_{self.machine}"


def interpreter_of(tree: Path, log_path: Path) -> Interpreter:
    """The image's own python3, asked in its tree (it is not the host's)."""
    code = "import platform, sys; print(*sys.version_info[:2], platform.libc_ver()[1], platform.machine())"
    with open(log_path, "ab") as log:
        proc = subprocess.run(["chroot", str(tree), "/usr/bin/python3", "-I", "-S", "-c", code],
                              stdin=subprocess.DEVNULL, capture_output=True, env={"PATH": GUEST_PATH})  # fmt: skip
        log.write(proc.stdout + proc.stderr)
    try:
        major, minor, glibc, machine = proc.stdout.decode().split()
        libc = tuple(int(p) for p in glibc.split(".")[:2])
        return Interpreter(int(major), int(minor), (libc[0], libc[1]), machine)
    except ValueError as exc:
        raise ImageError(f"the image has no python3 to install wheels for: {proc.stderr.decode()[-500:]}") from exc


def fetch(requirements: tuple[Requirement, ...], python: Interpreter, cache: Path, log_path: Path) -> list[Path]:
    """Each requirement's wheel, from the cache (by hash) or downloaded by pip for the image's
    interpreter: one a line, hash-checked, wheels only."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = []
    for requirement in requirements:
        cached = next((p for h in requirement.hashes for p in cache.glob(f"{h}/*.whl")), None)
        wheel = cached if cached is not None else _download(requirement, python, cache, log_path)
        if sha256_file(wheel) not in requirement.hashes:
            wheel.unlink()  # a cached file that changed: fetched again next time
            raise ImageError(f"{requirement.where}: {wheel.name} hashes to none of the line's hashes")
        wheels.append(wheel)
    return wheels


def _download(requirement: Requirement, python: Interpreter, cache: Path, log_path: Path) -> Path:
    where = f"{requirement.where}: {requirement.pin}"
    scratch = cache / f".download-{requirement.name}"
    scratch.mkdir(exist_ok=True)
    for stale in scratch.iterdir():
        stale.unlink()
    pinned = scratch / "requirement.txt"
    pinned.write_text(f"{requirement.pin} " + " ".join(f"--hash=sha256:{h}" for h in requirement.hashes) + "\n")
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--disable-pip-version-check", "--no-input", "--dest", str(scratch),
        "--python-version", f"{python.major}.{python.minor}", "--implementation", "cp",
        "--abi", f"cp{python.major}{python.minor}", "--abi", "abi3", "--abi", "none",
        *(arg for platform in python.platforms() for arg in ("--platform", platform)),
        "--requirement", str(pinned),
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        log.write(f"$ pip download {requirement.pin}\n".encode())
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PIP_TIMEOUT_S)
        log.write(proc.stdout + proc.stderr)
    found = sorted(scratch.glob("*.whl"))
    if proc.returncode != 0 or len(found) != 1:
        said = " ".join(line.strip() for line in proc.stderr.decode(errors="replace").splitlines()
                        if line.startswith("ERROR") or "Expected sha256" in line or "Got " in line)  # fmt: skip
        raise ImageError(
            f"{where}: no wheel for this image ({python.describe()}) with a hash the line gives"
            f"{' (pip: ' + said[:600] + ')' if said else ''}; an sdist is never built, and a wheel for another "
            "platform or Python is refused"
        )
    wheel = found[0]
    try:
        name = parse_wheel_filename(wheel.name)[0]
    except InvalidWheelFilename as exc:
        raise ImageError(f"{where}: {wheel.name} is not a wheel") from exc
    if name != requirement.name or not python.accepts(wheel.name):
        raise ImageError(f"{where}: {wheel.name} is not a wheel of it for this image ({python.describe()})")
    kept = cache / sha256_file(wheel) / wheel.name  # by hash; the name as it was (installers check it)
    kept.parent.mkdir(exist_ok=True)
    wheel.replace(kept)
    pinned.unlink()
    scratch.rmdir()
    return kept


def install(wheels: list[Path], tree: Path, python: Interpreter) -> tuple[str, ...]:
    """Unpack the wheels into the image's site directory (their scripts into /usr/local/bin), each
    checked first to hold only paths inside it; return the `pip:name=version` list they make."""
    from installer import install as unpack
    from installer.destinations import SchemeDictionaryDestination
    from installer.exceptions import InstallerError
    from installer.sources import WheelFile

    site = tree / python.site
    local = tree / "usr/local"
    scheme = {"purelib": site, "platlib": site, "headers": local / "include", "scripts": local / "bin", "data": local}
    for directory in scheme.values():
        directory.mkdir(parents=True, exist_ok=True)
    destination = SchemeDictionaryDestination(
        {key: str(value) for key, value in scheme.items()}, interpreter="/usr/bin/python3", script_kind="posix",
        bytecode_optimization_levels=(),
    )  # fmt: skip
    installed = []
    for wheel in wheels:
        _check_members(wheel)
        try:
            with WheelFile.open(wheel) as source:
                unpack(source, destination, {"INSTALLER": b"cordon\n"})
        except (ValueError, OSError, zipfile.BadZipFile, InstallerError) as exc:  # its RECORD, names, layout
            raise ImageError(f"{wheel.name}: not installed: {exc}") from exc
        name, version, _, _ = parse_wheel_filename(wheel.name)
        installed.append(f"pip:{name}={version}")
    return tuple(sorted(installed))


def _check_members(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            parts = Path(info.filename).parts
            if info.filename.startswith("/") or ".." in parts or (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ImageError(f"{wheel.name}: {info.filename!r} would land outside the image's site directory")
