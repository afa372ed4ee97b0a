"""Run locks: a file per run, held (flock) while the run's supervisor lives, so that a sweep
reclaims only what dead supervisors left and never a live run's sandbox."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class RunLock:
    """A per-run lock file held (flock) while the run's supervisor lives; sweeps skip held ones."""

    def __init__(self, locks_dir: Path, run_id: str):
        self.path = locks_dir / f"{run_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    self._fd = fd
                    return
            except FileNotFoundError:
                pass
            os.close(fd)  # a sweeper unlinked it between open and lock: take a fresh one

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def remove_if_stale(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.path.unlink(missing_ok=True)
        os.close(fd)
        return True

    def is_held(self) -> bool:
        """Whether a live supervisor holds this run's lock."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
