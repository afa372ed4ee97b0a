"""Verifying an extracted rootfs against its archive, path by path: the archive is the root of
trust, and the expected tree is re-derived from it."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import IO

from runner.images.recipes import CHUNK, ImageError, sha256_stream, walk

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


def manifest_from_archive(archive: Path) -> tuple[Manifest, str]:
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
        while reader.read(CHUNK):
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
                manifest[name] = ("file", m.mode, m.uid, m.gid, m.size, sha256_stream(_member_stream(layer, m)))
            else:
                raise ImageError(f"unexpected member type in image layer: {name}")
    return manifest


def _member_stream(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    stream = tar.extractfile(member)
    if stream is None:
        raise ImageError(f"image archive member {member.name} has no content")
    return stream


def manifest_from_tree(root: Path) -> Manifest:
    manifest: Manifest = {}
    for path in walk(root):
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
                digest = sha256_stream(handle)
            manifest[name] = ("file", mode, st.st_uid, st.st_gid, st.st_size, digest)
        else:
            manifest[name] = ("special", mode, st.st_uid, st.st_gid, 0, "")
    return manifest


_FIELDS = ("type", "mode", "uid", "gid", "size", "content")


def compare_manifests(expected: Manifest, actual: Manifest) -> list[str]:
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
