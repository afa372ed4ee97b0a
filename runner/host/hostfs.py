"""Host-side mounts for a run: size-capped tmpfs areas for scratch and outputs, and their audit."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2


def mount_tmpfs(
    target: Path, *, size_bytes: int, uid: int, gid: int | None = None, mode: int = 0o700, max_inodes: int | None = None
) -> None:
    """A tmpfs at `target` owned by `uid` (and `gid`), capped at `size_bytes`."""
    options = f"size={size_bytes},mode={mode:04o},uid={uid},gid={uid if gid is None else gid}"
    if max_inodes is not None:
        options += f",nr_inodes={max_inodes}"
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def resize_tmpfs(target: Path, *, size_bytes: int, max_inodes: int | None = None) -> None:
    """Give the tmpfs mounted at `target` a new size (and inode count); its files stay. Everywhere
    it is mounted (a sandbox's bind of it too) sees the one superblock's new size."""
    options = f"size={size_bytes}" + (f",nr_inodes={max_inodes}" if max_inodes is not None else "")
    flags = MS_REMOUNT | MS_NOSUID | MS_NODEV
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"resize tmpfs on {target}: {os.strerror(err)}")


def bind_readonly(source: Path, target: Path) -> None:
    """Bind `source` on `target`, then make that view read-only, nosuid and nodev."""
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind {source} on {target}: {os.strerror(err)}")
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    if _libc.mount(None, os.fsencode(target), None, flags, None) != 0:
        err = ctypes.get_errno()
        unmount(target)
        raise OSError(err, f"remount {target} read-only: {os.strerror(err)}")


def unmount(target: Path) -> None:
    """Unmount `target`; fall back to a lazy detach if something still holds it."""
    if _libc.umount2(os.fsencode(target), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == 22:  # EINVAL: not a mount point (already unmounted)
        return
    if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def mounts_under(*directories: Path) -> list[Path]:
    """Mount points at or below any of `directories`, deepest first (the order to unmount them).
    One read of the mount table however many directories are asked about."""
    tops = [str(d).rstrip("/") for d in directories]
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            point = _unescape(line.split()[4])
            if any(point == top or point.startswith(top + "/") for top in tops):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def is_full(path: Path, slack_bytes: int = 4096) -> bool:
    """Whether a filesystem has (almost) no space left for an unprivileged writer."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize < slack_bytes or (stats.f_files > 0 and stats.f_favail == 0)


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


# As the uid: into each directory, top down; print the first it cannot enter.
_WALK = 'for d do cd -- "$d" 2>/dev/null || { printf %s "$d"; exit 1; }; done'


def untraversable(path: Path, uid: int) -> Path | None:
    """The first directory on the way to `path` (itself included) that `uid` cannot enter, or
    None. Asked of the kernel as that uid (a shell that changes into each in turn), so modes,
    ACLs and mount options all count; needs root to become the uid."""
    path = path.resolve()
    steps = [str(p) for p in [*reversed(path.parents), path]]
    walk = subprocess.run(
        ["/bin/sh", "-c", _WALK, "sh", *steps],
        user=uid, group=uid, extra_groups=[], capture_output=True, check=False, cwd="/", env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return Path(walk.stdout.decode()) if walk.returncode else None
