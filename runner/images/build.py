"""Building an image from its recipe: mmdebstrap, the prune of packages nothing uses, the
overlay, and the reproducible OCI archive whose sha256 is the image's digest."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.images.recipes import (
    DPKG_EXCLUDES,
    GUEST_PATH,
    HOST_FILES,
    MMDEBSTRAP_MERGED_USR_HOOK,
    MOUNT_POINTS,
    UNREPRODUCIBLE_FILES,
    ImageError,
    Recipe,
    rmtree,
    sha256_file,
    walk,
)
from runner.images.wheels import fetch, install, interpreter_of

# --- building -------------------------------------------------------------------------


def mmdebstrap(recipe: Recipe, target: Path, log_path: Path) -> None:
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


def prune(recipe: Recipe, tree: Path, log_path: Path) -> list[str]:
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


def replace_host_files(tree: Path) -> None:
    for name, content in HOST_FILES.items():
        path = tree / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_bytes(content)


def lay_overlay(recipe: Recipe, tree: Path) -> None:
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


def byte_compile_overlay(recipe: Recipe, tree: Path, log_path: Path) -> None:
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


def install_wheels(recipe: Recipe, tree: Path, cache: Path, log_path: Path) -> tuple[str, ...]:
    """The recipe's wheels (runner.images.wheels), fetched for the tree's own python3 and unpacked
    into it, then byte-compiled by it as Debian compiles its packages; their `pip:name=version` list."""
    if not recipe.requirements:
        return ()
    python = interpreter_of(tree, log_path)
    wheels = fetch(recipe.requirements, python, cache, log_path)
    installed = install(wheels, tree, python)
    code = (
        "import compileall, py_compile, sys\n"
        "ok = compileall.compile_dir(sys.argv[1], quiet=1, workers=1,\n"
        "    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)\n"
        "sys.exit(0 if ok else 1)\n"
    )
    argv = ["chroot", str(tree), "/usr/bin/python3", "-I", "-S", "-c", code, f"/{python.site}"]
    with open(log_path, "ab") as log:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              env={"PATH": GUEST_PATH, "PYTHONHASHSEED": "0"})  # fmt: skip
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageError(f"{recipe.name}: byte-compiling its wheels failed with status {proc.returncode}:\n{tail}")
    return installed


# An image whose overlay has this program gets, at build, the index its editor completes module
# members from (playground.completion): written inside the tree, so under the image's digest.
INDEX_PROGRAM = "usr/lib/cordon/cordon_index.py"
INDEX_FILE = "usr/lib/cordon/completion.json"


def index_modules(recipe: Recipe, tree: Path, log_path: Path) -> bool:
    """Run the overlay's INDEX_PROGRAM with the image's own python3 in the tree, writing INDEX_FILE;
    False when the recipe has none. Deterministic: a fixed hash seed, no bytecode written, and the
    scratch files its imports make (matplotlib's font cache) removed with /tmp's contents."""
    if not any(f.path == INDEX_PROGRAM for f in recipe.overlay):
        return False
    argv = ["chroot", str(tree), "/usr/bin/python3", "-s", "-B", f"/{INDEX_PROGRAM}", f"/{INDEX_FILE}"]
    env = {"PATH": GUEST_PATH, "PYTHONHASHSEED": "0", "HOME": "/nonexistent", "MPLCONFIGDIR": "/tmp/matplotlib"}
    with open(log_path, "wb") as log:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    scratch = tree / "tmp"
    for path in scratch.iterdir() if scratch.is_dir() else ():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if proc.returncode != 0 or not (tree / INDEX_FILE).is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ImageError(f"{recipe.name}: indexing the modules failed with status {proc.returncode}:\n{tail}")
    return True


def package_manifest(tree: Path) -> tuple[str, ...]:
    out = subprocess.run(
        ["dpkg-query", f"--admindir={tree / 'var/lib/dpkg'}", "-W", "-f", "${Package}=${Version}\n"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return tuple(sorted(line for line in out.splitlines() if line))


def finish_tree(tree: Path, epoch: int) -> None:
    """Make the tree safe to share read-only: root-owned, no devices, no setuid, world-readable,
    nothing group- or world-writable, fixed times."""
    dev = tree / "dev"
    if dev.exists():
        rmtree(dev)
    for mount_point in MOUNT_POINTS:
        (tree / mount_point).mkdir(exist_ok=True)
    for path in walk(tree):
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


def write_archive(recipe: Recipe, tree: Path, work: Path, out: Path) -> str:
    """Write a docker-save archive of `tree` deterministically; return its digest."""
    epoch = recipe.source_date_epoch
    layer = work / "layer.tar"
    with tarfile.open(layer, "w", format=tarfile.GNU_FORMAT) as tar:
        seen_inodes: dict[tuple[int, int], str] = {}
        for path in walk(tree):
            info = _tarinfo(path, tree, epoch, seen_inodes)
            if info.isreg():
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    layer_hex = sha256_file(layer)
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
    return f"sha256:{sha256_file(out)}"


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
