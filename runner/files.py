"""Files crossing the sandbox boundary: staging designated inputs in, exporting outputs out.

Both directions open every file with O_NOFOLLOW relative to a directory fd, accept regular
files only and count bytes as they copy, so a link, device, FIFO or growing file is refused,
never followed. Export runs only after the sandbox is verified empty, so nothing inside can
change the tree while it is read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner.spec import OUTPUT_MAX_DEPTH, SAFE_NAME, Limits, Outcome, OutputFile, RejectedOutput, RunnerError
from runner.units import size_words

# An input's name may name folders too ("outputs/figure-1.png"), each part a SAFE_NAME.
INPUT_MAX_DEPTH = 4
# Bytes of a file's path below /output: a path a file system holds as one name, and what the web's
# record of an output (RunOutputFile.name, 300 characters) keeps.
OUTPUT_NAME_MAX = 255
_CHUNK = 1 << 16
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TOO_DEEP = f"folder nested more than {OUTPUT_MAX_DEPTH} deep; nothing in it is exported"


def refused(code: str, message: str) -> RunnerError:
    return RunnerError(code, message, outcome=Outcome.REJECTED_INPUT)


def stage_inputs(inputs: tuple[Path, ...], dest: Path, limits: Limits, names: tuple[str, ...] = ()) -> list[OutputFile]:
    """Copy exactly the designated files into `dest` (read-only), or refuse the whole set.
    `names`, when given, are the names they appear under (a dataset's name, not its storage name;
    "a/b" stages b in a folder a, which the program may read but not change)."""
    if len(inputs) > limits.input_max_files:
        raise refused("too_many_inputs", f"{len(inputs)} input files; at most {limits.input_max_files} are allowed")
    staged: list[OutputFile] = []
    seen: set[str] = set()
    made: list[str] = []  # folders made for names with a "/" (a check program's outputs/...)
    budget = limits.input_max_bytes
    for index, source in enumerate(inputs):
        name = names[index] if index < len(names) else source.name
        parts = name.split("/")
        if len(parts) > INPUT_MAX_DEPTH or not all(SAFE_NAME.fullmatch(part) for part in parts):
            raise refused(
                "unsafe_input_name", f"input name {name!r} is not allowed (letters, digits, ._+- only, "
                f"in at most {INPUT_MAX_DEPTH - 1} folders)",
            )  # fmt: skip
        folders = ["/".join(parts[:depth]) for depth in range(1, len(parts))]
        if name in seen or name in made or any(folder in seen for folder in folders):
            raise refused("duplicate_input_name", f"two inputs are named {name!r} (or one is a folder of another)")
        seen.add(name)
        for folder in folders:
            if folder not in made:
                (dest / folder).mkdir(mode=0o700)
                made.append(folder)
        try:
            fd = os.open(source, OPEN_FLAGS)
        except OSError as exc:
            what = "is a symbolic link" if exc.errno == 40 else f"cannot be opened ({exc.strerror})"
            raise refused("input_refused", f"input {name!r} {what}") from None
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise refused("input_refused", f"input {name!r} is not a regular file ({_kind(st.st_mode)})")
            if st.st_nlink > 1:
                raise refused("input_refused", f"input {name!r} has hard links; copy it first")
            if st.st_size > budget:
                raise refused(
                    "inputs_too_large", f"inputs exceed the cap of {size_words(limits.input_max_bytes)} at {name!r}"
                )
            copied = copy_capped(handle, dest, name, budget, mode=0o444)
            if copied is None:
                raise refused(
                    "inputs_too_large", f"inputs exceed the cap of {size_words(limits.input_max_bytes)} at {name!r}"
                )
        size, digest = copied
        budget -= size
        staged.append(OutputFile(name, size, digest))
    for folder in reversed(made):
        os.chmod(dest / folder, 0o555)  # noqa: S103 - as the staging folder itself
    os.chmod(dest, 0o555)  # noqa: S103 - the sandbox uid must read its inputs
    return staged


@dataclass
class ExportReport:
    outputs: list[OutputFile] = field(default_factory=list)
    rejected: list[RejectedOutput] = field(default_factory=list)
    too_many: bool = False  # more files than the count cap
    # The first file refused for the byte cap, and its size (apparent: a sparse file counts at
    # its full length), so the outcome can name it.
    oversize: tuple[str, int] | None = None
    too_deep: str | None = None  # the first folder past OUTPUT_MAX_DEPTH, not entered

    @property
    def over_cap(self) -> bool:
        return self.too_many or self.oversize is not None or self.too_deep is not None


def export_outputs(area: Path, dest: Path | None, limits: Limits, *, skip: str | None = None) -> ExportReport:
    """Inspect the output area after exit; copy approved regular files to `dest` (if given).
    `skip` names a top-level folder that is not the user's (a cell's session files: runner.cells)."""
    report = ExportReport()
    budget = limits.output_max_bytes
    root_fd = os.open(area, DIR_FLAGS)
    try:
        for relative, entry_stat, parent_fd in _walk(root_fd):
            if skip is not None and relative == skip:
                continue
            reason = _reject_reason(relative, entry_stat)
            if reason == TOO_DEEP:
                report.too_deep = report.too_deep or relative
            if reason is None and len(report.outputs) >= limits.output_max_files:
                reason, report.too_many = f"over the cap of {limits.output_max_files} files", True
            if reason is None and entry_stat.st_size > budget:
                reason = f"over the cap of {size_words(limits.output_max_bytes)} in all"
                report.oversize = report.oversize or (relative, entry_stat.st_size)
            if reason is not None:
                report.rejected.append(RejectedOutput(relative, reason))
                continue
            copied = _export_one(parent_fd, relative, entry_stat, dest)
            if isinstance(copied, str):
                report.rejected.append(RejectedOutput(relative, copied))
                continue
            budget -= copied.size
            report.outputs.append(copied)
    finally:
        os.close(root_fd)
    return report


def _walk(root_fd: int) -> Iterator[tuple[str, os.stat_result, int]]:
    """(relative name, lstat, parent fd) for every non-directory below, sorted, links not followed,
    depth first; and each folder it does not enter: a disallowed name, or past OUTPUT_MAX_DEPTH.
    A stack of open folders, not recursion: the sandbox chose the depth. The parent fd stays open
    until the next item is asked for."""
    stack: list[tuple[int, str, Iterator[str]]] = [(root_fd, "", iter(sorted(os.listdir(root_fd))))]
    try:
        while stack:
            dir_fd, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if dir_fd != root_fd:
                    os.close(dir_fd)
                continue
            relative = f"{prefix}{entry}"
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
            # The stack holds the root and the folders above this entry: len(stack) is its depth.
            if stat.S_ISDIR(st.st_mode) and SAFE_NAME.fullmatch(entry) and len(stack) <= OUTPUT_MAX_DEPTH:
                child = os.open(entry, DIR_FLAGS, dir_fd=dir_fd)
                try:
                    names = sorted(os.listdir(child))
                except BaseException:
                    os.close(child)
                    raise
                stack.append((child, relative + "/", iter(names)))
            else:
                yield relative, st, dir_fd
    finally:
        for dir_fd, _, _ in stack[1:]:
            os.close(dir_fd)


def _reject_reason(relative: str, st: os.stat_result) -> str | None:
    base = relative.rsplit("/", 1)[-1]
    if stat.S_ISDIR(st.st_mode):  # a folder _walk did not enter
        return TOO_DEEP if SAFE_NAME.fullmatch(base) else "directory with a disallowed name"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({_kind(st.st_mode)})"
    if not SAFE_NAME.fullmatch(base):
        return "disallowed file name"
    if len(relative.encode()) > OUTPUT_NAME_MAX:
        return f"path longer than {OUTPUT_NAME_MAX} bytes"
    if st.st_nlink > 1:
        return "hard link"
    return None


def _export_one(parent_fd: int, relative: str, st: os.stat_result, dest: Path | None) -> OutputFile | str:
    base = relative.rsplit("/", 1)[-1]
    try:
        fd = os.open(base, OPEN_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        return f"cannot be opened ({exc.strerror})"
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return "changed while being inspected"
        target_dir = None
        if dest is not None:
            target_dir = dest / relative.rsplit("/", 1)[0] if "/" in relative else dest
            target_dir.mkdir(parents=True, exist_ok=True)
        copied = copy_capped(handle, target_dir, base, now.st_size, mode=0o644)
    if copied is None:
        return "grew while being exported"
    return OutputFile(relative, copied[0], copied[1])


def copy_capped(handle, dest: Path | None, name: str, max_bytes: int, *, mode: int) -> tuple[int, str] | None:  # type: ignore[no-untyped-def]
    """Copy at most `max_bytes` from `handle` to dest/name (new file); None if there was more."""
    digest = hashlib.sha256()
    size = 0
    target = None if dest is None else dest / name
    out = None
    if target is not None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.fdopen(os.open(target, flags, 0o600), "wb")
    try:
        while chunk := handle.read(min(_CHUNK, max_bytes - size + 1)):
            size += len(chunk)
            if size > max_bytes:
                break
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        if out is not None:
            os.fchmod(out.fileno(), mode)
    finally:
        if out is not None:
            out.close()
    if size > max_bytes:
        if target is not None:
            target.unlink()
        return None
    return size, digest.hexdigest()


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"
