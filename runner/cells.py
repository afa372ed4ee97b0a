"""Notebook cells: the state a cell starts from, carried in, and the session files it leaves.

A cell's run is an ordinary run whose program is the image's cell program (CELL_PROGRAMS) with
the script as its argument. Inside the sandbox that program restores the state an earlier cell
left (staged read-only as /input/.cordon-state), runs the script, shows its last expression and
its display() calls, and writes a snapshot of the script's top-level names, a manifest of them and
its displays under /output/.cordon. The host copies those files out like outputs, under caps of
their own, and never deserialises the snapshot: it is data that goes, unread, to the same user's
next cell. The hidden names cannot meet a user's file: a name the program may export or stage
starts with a letter or digit (runner.files.SAFE_NAME).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from runner.files import DIR_FLAGS, OPEN_FLAGS, copy_capped, refused
from runner.spec import (
    MANIFEST_FILE,
    MIB,
    RESTORING_FILE,
    SAFE_NAME,
    SESSION_DIR,
    STATE_FILE,
    Limits,
    OutputFile,
    RejectedOutput,
)
from runner.units import size_words

# In the sandbox: the programs that run a cell's script, the state it starts from, where it leaves
# its session files (SESSION_DIR and its files' names are the contract's, in runner.spec).
CELL_PROGRAMS = {"python": "/usr/lib/cordon/cell.py", "node": "/usr/lib/cordon/cell.js"}
STATE_INPUT_NAME = ".cordon-state"
# The session files besides the snapshot (the manifest, images a display showed): a notebook's
# page reads them, so they are small; more is refused at export, and the cell's page says so.
SESSION_MAX_FILES = 64
SESSION_FILES_MAX_BYTES = 16 * MIB
MANIFEST_MAX_BYTES = 8 * MIB


def session_area_bytes(limits: Limits) -> int:
    """Room a cell's session files need in its output area, beside the user's own files."""
    return limits.state_max_bytes + SESSION_FILES_MAX_BYTES


def cell_env(limits: Limits, *, has_state: bool, packages_elsewhere: str = "") -> dict[str, str]:
    """What the cell program is told: where its state is (if any) and its cap, and for `%pip
    install` which other environments have which packages (RunSpec.packages_elsewhere)."""
    env = {"CORDON_STATE_MAX_BYTES": str(limits.state_max_bytes)}
    if has_state:
        env["CORDON_CELL_STATE"] = f"/input/{STATE_INPUT_NAME}"
    if packages_elsewhere:
        env["CORDON_PACKAGES_ELSEWHERE"] = packages_elsewhere
    return env


def stage_state(source: Path, input_dir: Path, limits: Limits) -> OutputFile:
    """Copy the snapshot a cell starts from into its inputs (read-only), within state_max_bytes:
    the snapshot was within the cap when it was kept, and the cap may have been lowered since."""
    try:
        fd = os.open(source, OPEN_FLAGS)
    except OSError as exc:
        raise refused("state_refused", f"the state to start from cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refused("state_refused", "the state to start from is not a regular file")
        copied = copy_capped(handle, input_dir, STATE_INPUT_NAME, limits.state_max_bytes, mode=0o444)
    if copied is None:
        raise refused(
            "state_too_large",
            f"the state to start from is over state_max_bytes ({size_words(limits.state_max_bytes)}); "
            "raise the limit or restart from nothing",
        )
    return OutputFile(STATE_INPUT_NAME, *copied)


@dataclass
class SessionExport:
    files: list[OutputFile] = field(default_factory=list)  # names within SESSION_DIR
    rejected: list[RejectedOutput] = field(default_factory=list)
    state_oversize: int | None = None  # the snapshot's size when it passed state_max_bytes
    restoring: bool = False  # the marker was left: the program ended while its state was restored

    @property
    def state(self) -> OutputFile | None:
        return next((f for f in self.files if f.name == STATE_FILE), None)


def export_session(area: Path, dest: Path | None, limits: Limits) -> SessionExport:
    """Copy a cell's session files out of its output area (after exit, as export_outputs does):
    regular files with safe names directly in SESSION_DIR, the snapshot within state_max_bytes, the
    rest within SESSION_MAX_FILES and SESSION_FILES_MAX_BYTES, the manifest within its own cap."""
    report = SessionExport()
    area_fd = os.open(area, DIR_FLAGS)
    try:
        dir_fd = os.open(SESSION_DIR, DIR_FLAGS, dir_fd=area_fd)
    except FileNotFoundError:
        return report  # the program ended before its cell program wrote anything
    except OSError as exc:  # a link or a file where the folder should be: the program's doing
        report.rejected.append(RejectedOutput(SESSION_DIR, f"cannot be opened ({exc.strerror})"))
        return report
    finally:
        os.close(area_fd)
    budget = SESSION_FILES_MAX_BYTES
    try:
        names = sorted(os.listdir(dir_fd))
        report.restoring = RESTORING_FILE in names
        for name in names:
            if name == RESTORING_FILE:
                continue
            reason, cap = _session_reason(name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False), limits)
            if reason is None and name not in (STATE_FILE, MANIFEST_FILE):
                if len(report.files) >= SESSION_MAX_FILES:
                    reason = f"over the cap of {SESSION_MAX_FILES} session files"
                cap = min(cap, budget)
            if reason is None:
                copied = _copy_one(dir_fd, name, dest, cap)
                if copied is None:
                    reason = f"over its cap of {size_words(cap)}"
                else:
                    report.files.append(copied)
                    budget -= copied.size if name not in (STATE_FILE, MANIFEST_FILE) else 0
                    continue
            if name == STATE_FILE:
                report.state_oversize = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
            report.rejected.append(RejectedOutput(f"{SESSION_DIR}/{name}", reason))
    finally:
        os.close(dir_fd)
    return report


def _session_reason(name: str, st: os.stat_result, limits: Limits) -> tuple[str | None, int]:
    caps = {STATE_FILE: limits.state_max_bytes, MANIFEST_FILE: MANIFEST_MAX_BYTES}
    cap = caps.get(name, SESSION_FILES_MAX_BYTES)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file", cap
    if not SAFE_NAME.fullmatch(name):
        return "disallowed file name", cap
    if st.st_nlink > 1:
        return "hard link", cap
    if st.st_size > cap:
        return f"over its cap of {size_words(cap)}", cap
    return None, cap


def _copy_one(dir_fd: int, name: str, dest: Path | None, cap: int) -> OutputFile | None:
    fd = os.open(name, OPEN_FLAGS, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        if dest is not None:
            dest.mkdir(mode=0o700, parents=True, exist_ok=True)
        copied = copy_capped(handle, dest, name, cap, mode=0o600)
    return None if copied is None else OutputFile(name, *copied)
