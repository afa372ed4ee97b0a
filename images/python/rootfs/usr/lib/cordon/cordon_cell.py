"""Cordon's notebook cell program: one IPython cell in its own sandbox, run as a kernel would run it
after the cells above it, which it knows only from the state file the cell before left.

    /usr/bin/python3 /usr/lib/cordon/cell.py SCRIPT [ARGS...]

Each cell is a run of its own (runner.cells on the host). The program restores what a kernel
would still hold (the user's names, In and Out, `_` and its kin, the execution count, the random
states, the settings of numpy, pandas, matplotlib and warnings, the working directory and the
environment the cells changed), runs SCRIPT through IPython (cordon_shell: magics, `!`, display
hook, inline figures, tracebacks), then writes what it holds now for the next cell, also after an
error (a kernel keeps what a failed cell bound before it failed). Environment: CORDON_STATE_MAX_BYTES
(the state's cap) and, when there is a state to start from, CORDON_CELL_STATE (its path,
read-only); both are removed before the cell runs. The session files, in /output/.cordon (made
before the cell runs, written through its descriptor):

    state      the state file (cordon_state's format), unless the cell's process was ended; over its
               cap, a sparse file of exactly cap + 1 bytes, which the host refuses (output_limit)
    cell.json  the manifest (version 2), written last: the displays in order (Jupyter's mime
               bundles, images as the files below, where in stdout and stderr each came), the error
               (IPython's traceback and the cell's line), the names carried and not, the state
    display-<n>.png|jpeg|svg   the images display <n> showed
    restoring  present only while the state is restored: running out of memory there says why

Functions and classes a cell defines are saved by value (cloudpickle), with the namespace of the
cell that loads them as their globals: as in a kernel, they see that cell's names, not copies of
the names they used when they were saved. Their code keeps the name IPython gave it, so a
traceback through them says `Cell In[n]` as Jupyter's does.
"""

import builtins
import io
import os
import re
import stat
import sys

import cordon_shell
import cordon_state
from cordon_state import DamagedState, short, words

TYPE_CHECKING = False  # typing itself is not imported: every cell pays for what this imports
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType
    from typing import Any

    from cordon_shell import CellShell

    Json = dict[str, Any]

KIB = 1024
MIB = 1024 * KIB
SESSION_DIR = "/output/.cordon"
STATE_FILE, MANIFEST_FILE, RESTORING_FILE = "state", "cell.json", "restoring"  # runner.cells' names
DEFAULT_STATE_MAX_BYTES = 256 * MIB  # runner.spec.Limits' default, for a cell run by hand
# Names IPython keeps for itself and makes again from what it carries: the inputs (_i, _ii, _iii,
# _i<n>: from In) and the outputs (_<n>: from Out).
KERNEL_NAMES = re.compile(r"_i{1,3}|_i\d+|_\d+|_ih|_oh|_dh|In|Out")
DISPLAYED = "the displayed results (_, __, ___)"
RESULTS = ("out", "displayed", "under")  # what the display hook keeps (Out, `_`): dropped first
# Files the cells write where they start (a kernel's working folder, kept by its disk): carried
# as state, up to a share of the state's cap, so a cell reads what a cell above it wrote.
SCRATCH = "/tmp"
FILES = "the files in /tmp"
FILES_MAX, FILES_MAX_BYTES = 256, 64 * MIB
# In (and IPython's raw inputs) are carried whole up to this, the oldest emptied past it: the state's
# header is JSON, which the next cell reads whole (at most cordon_state.HEADER_MAX_BYTES).
HISTORY_MAX_BYTES = 16 * MIB
# Caches the image's libraries make there (IPython's folder, matplotlib's font cache): made again
# by the next cell, or already there in its ready sandbox.
NOT_FILES = (".ipython", ".cache")

# The manifest and the display images stay within what the host exports (runner.cells): 64 session
# files (cell.json among them; the state is counted apart), 16 MiB of images, an 8 MiB manifest of
# which the displays may take 6 and the variables' tables 1.
MANIFEST_MAX_BYTES = 8 * MIB
DISPLAYS_MAX = 100
DISPLAYS_MAX_BYTES = 6 * MIB
DISPLAY_FILES_MAX = 63
DISPLAY_FILES_MAX_BYTES = 16 * MIB
PLAIN_MAX_BYTES = 64 * KIB
TEXT_MAX_BYTES = 1 * MIB
TRACEBACK_MAX_BYTES = 256 * KIB
VARIABLE_TABLE_ROWS, VARIABLE_TABLES, VARIABLE_TABLES_MAX_BYTES = 50, 20, 1 * MIB
IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpeg", "image/svg+xml": "svg"}
# What the editor completes after a carried name (names, never values): the first 300 names, 100
# types, 500 attributes each, a name of at most 100 characters, a signature or doc line of 300.
COMPLETION_NAMES, COMPLETION_TYPES, COMPLETION_ATTRIBUTES, COMPLETION_NAME_CHARS = 300, 100, 500, 100
COMPLETION_TEXT_CHARS = 300


def main(argv: "list[str]") -> object:
    """Run the cell; the exit status, as SystemExit takes it."""
    if len(argv) < 2:
        return "usage: cell.py SCRIPT [ARGS...]"
    script, cap, state = argv[1], _state_cap(), os.environ.pop("CORDON_CELL_STATE", None)
    pid = os.getpid()
    sys.argv = argv[1:]
    sys.path[0] = os.path.dirname(os.path.realpath(script))  # as a kernel started in the cell's folder
    streams = Streams.install()
    session = Session.make()
    record = Record(session, streams)
    shell = _shell()
    shell.sink = record
    kernel = Kernel(shell, script)
    restored = None if state is None else kernel.restore(state, session)
    try:
        with open(script, encoding="utf-8", errors="surrogateescape") as handle:
            source = handle.read()
    except OSError as exc:
        return f"cordon: cannot read {script}: {exc.strerror}"
    number = shell.execution_count
    result = shell.run_cell(source, store_history=True)
    status = _status(result.error_before_exec or result.error_in_exec, record)
    if session is None or os.getpid() != pid:  # a child the cell forked ends as the cell did
        return status
    _no_figures_at_exit()
    if not session.is_intact():
        _say(f"{SESSION_DIR} was replaced while the cell ran: its state and displays are not kept")
        return status
    manifest: Json = {"version": 2, "execution_count": number, "displays": record.bundles,
                      "displays_dropped": record.dropped, "cleared": record.cleared, "restored": restored,
                      "error": record.failure}  # fmt: skip
    try:
        manifest.update(kernel.save(session, cap))
    except Exception as exc:  # the displays and the error are kept all the same
        session.remove(STATE_FILE)
        why = exc.strerror if isinstance(exc, OSError) else words(exc)
        _say(f"could not write the state ({why}); the next cell starts from the state before")
        manifest.update(variables=[], not_carried=[], modules={}, state=None)
        status = status or 1
    _write_manifest(session, manifest)
    return status


def _state_cap() -> int:
    try:
        return int(os.environ.pop("CORDON_STATE_MAX_BYTES", DEFAULT_STATE_MAX_BYTES))
    except ValueError:
        return DEFAULT_STATE_MAX_BYTES


def _shell() -> "CellShell":
    """The shell a ready sandbox made before its run was known, else one made now."""
    if cordon_shell.CellShell.initialized():
        return cordon_shell.CellShell.instance()  # type: ignore[no-any-return]
    return cordon_shell.make_shell()


def _status(error: "BaseException | None", record: "Record") -> object:
    """The exit status: 0 when the cell ran through, sys.exit's code, else 1 (IPython has shown
    the error; a kernel would go on, and so does the state)."""
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        if error.code is None or error.code == 0:
            record.failure = None  # shown, as IPython shows it, but not a failure
            return 0
        return error.code if isinstance(error.code, int) else 1
    return 1


def _no_figures_at_exit() -> None:
    """The image's start-up hook saves the figures a program leaves open as files; a cell's figures
    were shown by the inline backend, and one still open is the next cell's, as in a kernel."""
    hook = sys.modules.get("sitecustomize")
    save = getattr(hook, "_save_open_figures", None)
    if save is not None:
        import atexit

        atexit.unregister(save)


# --- the session folder --------------------------------------------------------------------------


class Session:
    """/output/.cordon, made before the cell runs and written through its descriptor, never
    through a link: the cell runs as the same user and may have replaced anything in it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def make(cls) -> "Session | None":
        try:
            os.mkdir(SESSION_DIR, 0o755)
            fd = os.open(SESSION_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            _say(f"cannot make {SESSION_DIR} ({exc.strerror}): this cell leaves no state and no displays")
            return None
        os.fchmod(fd, 0o755)  # whatever the umask
        return cls(fd)

    def is_intact(self) -> bool:
        """Whether the folder at the path is still the one this program made."""
        try:
            now, mine = os.stat(SESSION_DIR, follow_symlinks=False), os.fstat(self.fd)
        except OSError:
            return False
        return stat.S_ISDIR(now.st_mode) and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    def write(self, name: str, pieces: "Iterable[Any]") -> None:
        fd = self._create(name)
        try:
            cordon_state.write_all(fd, pieces)
        finally:
            os.close(fd)

    def write_sparse(self, name: str, size: int) -> None:
        fd = self._create(name)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def _create(self, name: str) -> int:
        self.remove(name)  # whatever the cell left under this name is replaced, never written through
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, flags, 0o644, dir_fd=self.fd)


# --- where in its streams a display came ---------------------------------------------------------


class _Counted(io.FileIO):
    """A standard stream's file that counts the bytes written through it."""

    written = 0

    def write(self, data: "Any") -> int:
        count: int = super().write(data)
        self.written += count or 0
        return count


class Streams:
    """stdout and stderr as python -u makes them (write-through, unbuffered), counting their bytes,
    so a display and an error can say where in the streams they came. What a process writes to
    the descriptors itself (a child that is not `!cmd`'s) is not counted: the places are hints."""

    def __init__(self, files: "dict[str, _Counted]") -> None:
        self.files = files

    @classmethod
    def install(cls) -> "Streams":
        files = {}
        for name in ("stdout", "stderr"):
            old = getattr(sys, name)
            try:
                fd = old.fileno()
                counted = _Counted(fd, "wb", closefd=False)
                new = io.TextIOWrapper(counted, encoding=old.encoding, errors=old.errors, write_through=True)
            except (AttributeError, OSError, ValueError):
                continue
            old.flush()
            setattr(sys, name, new)
            files[name] = counted
        return cls(files)

    def at(self) -> "Json":
        cordon_shell.flush_streams()
        return {name: counted.written for name, counted in self.files.items()}


# --- the cell's displays and error ---------------------------------------------------------------


class Record(cordon_shell.Sink):
    """What the cell showed, as Jupyter's mime bundles in order, within the manifest's and the
    session files' caps (a display that does not fit is dropped whole and counted), and its error."""

    def __init__(self, session: "Session | None", streams: Streams) -> None:
        self.session, self.streams = session, streams
        self.bundles: list[Json] = []
        self.dropped = 0
        self.cleared: Json | None = None
        self.failure: Json | None = None  # the error IPython showed
        self.shell: Any = None

    def display(self, data: "Json", metadata: "Json", *, result: "int | None" = None,
                display_id: "str | None" = None, update: bool = False) -> None:  # fmt: skip
        if self.session is None:
            return  # nowhere to keep it
        if update:
            index = next((n for n, b in enumerate(self.bundles) if b.get("display_id") == display_id), None)
            if index is not None:
                self._replace(index, data, metadata)
            return
        if len(self.bundles) >= DISPLAYS_MAX:
            self.dropped += 1
            return
        entry = self._entry(len(self.bundles) + 1, data, metadata)
        if entry is None:
            self.dropped += 1
            return
        entry.update(at=self.streams.at())
        if result is not None:
            entry["result"] = result
        if isinstance(display_id, str):
            entry["display_id"] = short(display_id)
        self.bundles.append(entry)

    def clear(self) -> None:
        """clear_output(): the displays so far go; the page hides the streams before this point."""
        for number in range(1, len(self.bundles) + 1):
            self._remove_images(number)
        self.bundles.clear()
        self.cleared = self.streams.at()

    def error(self, ename: str, evalue: str, traceback: "list[str]", exc: "BaseException | None") -> None:
        self.failure = {
            "ename": ename,
            "evalue": _cut(evalue, PLAIN_MAX_BYTES),
            "traceback": _last_lines(traceback),
            "line": _line_in_cell(exc),
            "at": self.streams.at(),
        }

    def _replace(self, index: int, data: "Json", metadata: "Json") -> None:
        entry = self._entry(index + 1, data, metadata)
        if entry is not None:
            self.bundles[index]["data"] = entry["data"]

    def _entry(self, number: int, data: "Json", metadata: "Json") -> "Json | None":
        """The bundle as kept: images as session files, texts within their caps; None if it does
        not fit what is left."""
        import json

        kept: Json = {}
        images: dict[str, bytes] = {}
        for mime, value in data.items():
            if not isinstance(mime, str):
                continue
            if mime in IMAGE_EXTENSIONS:
                content = _image_bytes(mime, value)
                if content is None:
                    _say(f"display {number}: {mime} is neither bytes nor base64 text; left out")
                    continue
                name = f"display-{number}.{IMAGE_EXTENSIONS[mime]}"
                images[name], kept[mime] = content, {"file": name}
                continue
            value = _text_or_json(mime, value)
            if value is None:
                _say(f"display {number}: {mime} is not text or JSON within {TEXT_MAX_BYTES // MIB} MiB; left out")
                continue
            kept[mime] = _cut(value, PLAIN_MAX_BYTES) if isinstance(value, str) and mime == "text/plain" else value
        others = [b for n, b in enumerate(self.bundles, 1) if n != number]
        json_bytes = sum(len(json.dumps(b["data"])) for b in others) + len(json.dumps(kept))
        files = {name: size for b in others for name, size in b.get("files", {}).items()}
        if (
            json_bytes > DISPLAYS_MAX_BYTES
            or len(files) + len(images) > DISPLAY_FILES_MAX
            or sum(files.values()) + sum(len(c) for c in images.values()) > DISPLAY_FILES_MAX_BYTES
            or not self._write_images(images, number)
        ):
            return None
        entry: Json = {"data": kept}
        if images:
            entry["files"] = {name: len(content) for name, content in images.items()}
        width, height = _size(metadata)
        if width or height:
            entry["metadata"] = {"width": width, "height": height}
        return entry

    def _write_images(self, images: "dict[str, bytes]", number: int) -> bool:
        session = self.session
        if session is None:
            return False
        self._remove_images(number)
        try:
            for name, content in images.items():
                session.write(name, [content])
        except OSError as exc:
            _say(f"display {number} could not be kept ({exc.strerror})")
            self._remove_images(number)
            return False
        return True

    def _remove_images(self, number: int) -> None:
        if self.session is not None:
            for extension in IMAGE_EXTENSIONS.values():
                self.session.remove(f"display-{number}.{extension}")


def _size(metadata: "Json") -> "tuple[int | None, int | None]":
    """A figure's width and height in CSS pixels, as the inline backend gives them for a retina image."""
    found = [metadata[mime] for mime in IMAGE_EXTENSIONS if isinstance(metadata.get(mime), dict)]
    source: Json = found[0] if found else metadata
    sizes = [source.get(key) for key in ("width", "height")]
    return tuple(n if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 100_000 else None for n in sizes)  # type: ignore[return-value]


def _image_bytes(mime: str, value: object) -> "bytes | None":
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, str):
        return None
    if mime == "image/svg+xml":
        return value.encode("utf-8", "replace")
    import base64
    import binascii

    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        return None


def _text_or_json(mime: str, value: object) -> object:
    """Text, or JSON data (a copy: the cell may change its own later), within the cap."""
    import json

    if isinstance(value, str):
        return value if mime == "text/plain" or len(value.encode("utf-8", "replace")) <= TEXT_MAX_BYTES else None
    if isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return None
        return json.loads(text) if len(text) <= TEXT_MAX_BYTES else None
    return None


def _line_in_cell(exc: "BaseException | None") -> "int | None":
    """The cell's own line that failed (its frame's, not a function's it called): what the cell
    bound before it carries, and the editor marks it."""
    shell = cordon_shell.CellShell.instance()
    mine = {name for name, number in shell.compile._filename_map.items() if number == shell.execution_count}
    if isinstance(exc, SyntaxError) and exc.filename in mine:
        return exc.lineno
    tb: TracebackType | None = exc.__traceback__ if exc is not None else None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in mine:
            return tb.tb_lineno
        tb = tb.tb_next
    return None


def _last_lines(lines: "list[str]") -> "list[str]":
    """The end of a traceback within its cap: where it failed is at the end."""
    kept, size = [], 0
    for line in reversed(lines):
        line = _cut(line, 8 * KIB)
        size += len(line) + 1
        if size > TRACEBACK_MAX_BYTES:
            kept.append("[... the lines before are cut]")
            break
        kept.append(line)
    return kept[::-1]


# --- what a kernel keeps -------------------------------------------------------------------------


class Kernel:
    """What a kernel keeps between cells, restored before the cell and saved after it."""

    def __init__(self, shell: "CellShell", script: str) -> None:
        self.shell, self.script = shell, os.path.realpath(script)
        shell.init_sys_modules()  # the user's namespace is __main__ (a ready sandbox ran ready.py's)
        shell.history_manager.dir_hist[:] = [os.getcwd()]
        cordon_shell.inline_figures(shell)
        self.baseline = dict(shell.user_ns)  # what IPython put there: not the user's
        self.settings = {setting.name: setting.read() for setting in SETTINGS}  # as the image has them
        self.environ = dict(os.environ)
        self.restored_settings: set[str] = set()
        self.cap = DEFAULT_STATE_MAX_BYTES

    # --- restoring

    def restore(self, path: str, session: "Session | None") -> "Json":
        """Restore what the state holds, each name on its own: one that fails is said on stderr and
        listed, and the others are restored all the same."""
        try:
            file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below, after the marker is made
        except OSError as exc:
            _say(f"could not restore the state: it cannot be opened ({exc.strerror})")
            return {"bytes": 0, "names": 0, "failed": [{"name": "(state)", "why": "the state file cannot be opened"}]}
        if session is not None:
            session.write(RESTORING_FILE, [])
        failed: list[Json] = []
        try:
            with file:
                size = os.fstat(file.fileno()).st_size
                names = self._restore_from(file, size, failed)
        finally:
            self.shell.user_ns["__builtins__"] = builtins  # cloudpickle sets builtins' dict there
            if session is not None:
                session.remove(RESTORING_FILE)
        return {"bytes": size, "names": names, "failed": failed}

    def _restore_from(self, file: "io.FileIO", size: int, failed: "list[Json]") -> int:
        try:
            reader = cordon_state.Reader(file, size)
        except DamagedState as exc:
            _fail(failed, "(state)", f"the state file is damaged: {exc}")
            return 0
        header = reader.header
        kernel: Json = header.get("kernel") or {}
        names: Json = _import_modules(header["modules"], failed)
        outputs: dict[int, object] = {}
        entries = iter(reader.entries())
        while True:
            try:
                entry, value, why = next(entries)
            except StopIteration:
                break
            except DamagedState as exc:
                done = {f["name"] for f in failed} | set(names)
                for lost in header["entries"]:
                    if lost["name"] not in done and not _is_out(lost["name"]):
                        _fail(failed, lost["name"], f"the state file is damaged: {exc}")
                break
            except MemoryError:
                _out_of_memory()
            if why is not None:
                _fail(failed, entry["name"], why)
                continue
            kind = entry.get("kind", "user")
            if kind == "out" and _is_out(entry["name"]):
                outputs[int(entry["name"][4:-1])] = value
            elif kind == "displayed" and isinstance(value, tuple) and len(value) == 3:
                displayhook = self.shell.displayhook
                displayhook._, displayhook.__, displayhook.___ = value
            elif kind == "setting":
                self._apply_setting(entry["name"], value, failed)
            elif kind == "files":
                _put_files(value, failed)
            else:
                names[entry["name"]] = value
        self._restore_kernel(kernel, outputs, failed)
        self.shell.user_ns.update(names)
        return len([name for name in names if not name.startswith("_")])

    def _restore_kernel(self, kernel: "Json", outputs: "dict[int, object]", failed: "list[Json]") -> None:
        shell, history = self.shell, kernel.get("history")
        count = kernel.get("execution_count")
        if isinstance(count, int) and count >= 1:
            shell.execution_count = count
        if isinstance(history, dict):
            manager = shell.history_manager
            parsed, raw = _strings(history.get("parsed")), _strings(history.get("raw"))
            if parsed is not None and raw is not None and len(parsed) == len(raw):
                manager.input_hist_parsed[:] = parsed
                manager.input_hist_raw[:] = raw
                unders = _strings(history.get("unders"))
                if unders is not None and len(unders) == 4:
                    manager._i00, manager._i, manager._ii, manager._iii = unders
                    shell.push({"_i": manager._i, "_ii": manager._ii, "_iii": manager._iii}, interactive=False)
                shell.push({f"_i{n}": raw[n] for n in range(1, len(raw))}, interactive=False)
            cells = history.get("cells")
            if isinstance(cells, dict) and parsed is not None:
                self._cells_for_tracebacks(cells, parsed)
        shell.history_manager.output_hist.update(outputs)
        shell.push({f"_{n}": value for n, value in outputs.items()}, interactive=False)
        for name, apply in (("cwd", _chdir), ("environ", self._environ)):
            if name in kernel:
                apply(kernel[name])
        for name in ("random", "numpy.random"):
            if name in kernel:
                self._apply_setting(name, kernel[name], failed)

    def _cells_for_tracebacks(self, cells: "Json", parsed: "list[str]") -> None:
        """Code an earlier cell defined is known by the name IPython compiled it under: with that
        cell's lines, a traceback through it reads `Cell In[n], line k` and shows the line."""
        import linecache
        import time

        compiler = self.shell.compile
        for name, number in cells.items():
            if isinstance(name, str) and isinstance(number, int) and 0 < number < len(parsed):
                code = parsed[number] + "\n"
                entry = (len(code), time.time(), code.splitlines(keepends=True), name)
                compiler._filename_map[name] = number
                linecache.cache[name] = entry
                linecache._ipython_cache[name] = entry  # type: ignore[attr-defined]

    def _environ(self, changes: object) -> None:
        if isinstance(changes, dict):
            for name, value in changes.items():
                if isinstance(name, str) and name and "=" not in name and "\0" not in name:
                    if value is None:
                        os.environ.pop(name, None)
                    elif isinstance(value, str) and "\0" not in value:
                        os.environ[name] = value
        self.environ = dict(os.environ)

    def _apply_setting(self, name: str, value: object, failed: "list[Json]") -> None:
        setting = next((s for s in SETTINGS if s.name == name), None)
        if setting is None:
            return
        try:
            setting.write(value)
        except Exception as exc:
            _fail(failed, name, words(exc))
            return
        self.restored_settings.add(name)

    # --- saving

    def save(self, session: Session, cap: int) -> "Json":
        """Write the state (also after an error); the manifest's account of it."""
        self.cap = cap
        items, modules, not_carried, listed = self._items()
        facts = self._kernel_facts()
        snapshot, header, total = self._snapshot(items, modules, facts)
        results = [(name, value) for name, kind, value in items if kind in RESULTS]
        if total > cap and results:
            # The results a kernel caches (Out, `_`) go first: a state without them still holds every
            # name, where one over the cap holds nothing. A name bound to a result keeps it.
            items = [item for item in items if item[1] not in RESULTS]
            not_carried += [{"name": name, "type": _type_name(value), "why": "kept out: the state would pass its cap"}
                            for name, value in results if name != DISPLAYED]  # fmt: skip
            snapshot, header, total = self._snapshot(items, modules, facts)
        for name, why in snapshot.failed.items():
            value = next(v for n, _, v in items if n == name)
            not_carried.append({"name": name, "type": _type_name(value), "why": why})
        blobs = snapshot.blobs
        if total > cap:
            # The host refuses a state over its cap and ends the run output_limit; a sparse file one
            # byte over says so without writing (or holding) the data.
            session.write_sparse(STATE_FILE, cap + 1)
            state = {"bytes": total, "over_cap": True}
        else:
            session.write(STATE_FILE, cordon_state.pieces(header, blobs))
            state = {"bytes": total, "over_cap": False}
        kept = [(name, value) for name, value in listed if name not in snapshot.failed]
        files: Any = next((value for name, _, value in items if name == FILES and name not in snapshot.failed), {})
        carried = [{"name": f"{SCRATCH}/{path}", "bytes": len(data)} for path, (_, data) in files.items()]
        return {"variables": _variables(kept), "not_carried": not_carried, "modules": modules, "state": state,
                "files": carried, "completion": _completion(kept)}  # fmt: skip

    def _snapshot(
        self, items: "list[tuple[str, str, object]]", modules: "dict[str, str]", facts: "Json"
    ) -> "tuple[cordon_state.Snapshot, Json, int]":
        all_plain = all(type(value) in cordon_state.PLAIN_TYPES for _, _, value in items)
        pickler = cordon_state.make_pickler_class(all_plain, _live_namespace(self.shell))
        snapshot = cordon_state.snapshot([(name, value) for name, _, value in items], pickler)
        kinds = {name: kind for name, kind, _ in items}
        for entry in snapshot.entries:
            if kinds[entry["name"]] != "user":
                entry["kind"] = kinds[entry["name"]]
        header, _ = cordon_state.header_and_blobs(snapshot, modules, facts)
        return snapshot, header, snapshot.total_bytes(header)

    def _items(self) -> "tuple[list[tuple[str, str, object]], dict[str, str], list[Json], list[tuple[str, object]]]":
        """What to carry: (name, kind, value) for the user's names, Out, the displayed results and
        the settings the cells changed; the names bound to modules; what is not carried and why;
        the names to list as variables."""
        shell, items, modules, not_carried, listed = self.shell, [], {}, [], []
        for name, value in list(shell.user_ns.items()):
            if not isinstance(name, str) or KERNEL_NAMES.fullmatch(name) or _dunder(name):
                continue
            if name in self.baseline and self.baseline[name] is value:
                continue  # IPython's own (get_ipython, exit, quit): made again by the next shell
            if isinstance(value, type(sys)) and sys.modules.get(value.__name__) is value:
                modules[name] = value.__name__  # imported again by name
                continue
            why = _why_not_carried(value)
            if why is not None:
                not_carried.append({"name": name, "type": _type_name(value), "why": why})
                continue
            # `_`, `__` and `___` as the display hook set them are its results, not the user's names.
            under = name in ("_", "__", "___") and getattr(shell.displayhook, name, None) is value
            why = _why_not_in_out(value) if under else None
            if why is not None:
                not_carried.append({"name": name, "type": _type_name(value), "why": why})
                continue
            items.append((name, "under" if under else "user", value))
            if not name.startswith("_"):
                listed.append((name, value))
        named = {id(value) for _, kind, value in items if kind == "user"}  # carried anyway: free to share
        for number, value in sorted(shell.history_manager.output_hist.items()):
            why = None if id(value) in named else _why_not_carried(value) or _why_not_in_out(value)
            if why is None:
                items.append((f"Out[{number}]", "out", value))
            else:
                not_carried.append({"name": f"Out[{number}]", "type": _type_name(value), "why": why})
        displayhook = shell.displayhook
        displayed = (displayhook._, displayhook.__, displayhook.___)
        named |= {id(value) for _, kind, value in items if kind == "user"}
        if not any(id(v) not in named and (_why_not_carried(v) or _why_not_in_out(v)) for v in displayed):
            items.append((DISPLAYED, "displayed", displayed))
        files, too_big = _working_files(self.script, self.cap)
        if files:
            items.append((FILES, "files", files))
        not_carried.extend(too_big)
        for setting in SETTINGS:
            if setting.pickled:
                value = setting.read()
                if value is not None and (
                    setting.name in self.restored_settings or value != self.settings[setting.name]
                ):
                    items.append((setting.name, "setting", value))
        return items, modules, not_carried, listed

    def _kernel_facts(self) -> "Json":
        """What the next cell's shell needs that is JSON: the execution count, the history, the
        names IPython compiled the cells under, the working directory, the environment changed,
        the random states (when restored, seeded or drawn from)."""
        shell = self.shell
        manager = shell.history_manager
        cells = {name: number for name, number in shell.compile._filename_map.items() if isinstance(number, int)}
        facts: Json = {
            "execution_count": shell.execution_count,
            "history": {
                "parsed": _within(manager.input_hist_parsed, HISTORY_MAX_BYTES // 2),
                "raw": _within(manager.input_hist_raw, HISTORY_MAX_BYTES // 2),
                "unders": [manager._i00, manager._i, manager._ii, manager._iii],
                "cells": cells,
            },
            "cwd": os.getcwd(),
        }
        changed: dict[str, str | None] = {k: v for k, v in os.environ.items() if self.environ.get(k) != v}
        changed.update({k: None for k in self.environ if k not in os.environ})
        if changed:
            facts["environ"] = changed
        for setting in SETTINGS:
            if not setting.pickled:
                value = setting.read()
                if value is not None and (
                    setting.name in self.restored_settings or value != self.settings[setting.name]
                ):
                    facts[setting.name] = value
        return facts


def _working_files(script: str, cap: int) -> "tuple[dict[str, tuple[int, bytearray]], list[Json]]":
    """The regular files under SCRATCH but the cell's script (by path relative to it: mode and
    contents), within FILES_MAX files and a quarter of the state's cap; what is over, listed."""
    budget = share = min(FILES_MAX_BYTES, cap // 4)
    files: dict[str, tuple[int, bytearray]] = {}
    too_big: list[Json] = []
    for folder, dirs, names in os.walk(SCRATCH):
        if folder == SCRATCH:
            dirs[:] = [d for d in dirs if d not in NOT_FILES]
        for name in sorted(names):
            path = os.path.join(folder, name)
            if path == script:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # a link, a socket: not a file to carry
            with os.fdopen(fd, "rb", buffering=0) as handle:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    continue
                why = None
                if len(files) >= FILES_MAX:
                    why = f"more than {FILES_MAX} files"
                elif info.st_size > budget:
                    why = f"a file of {_bytes(info.st_size)}, over the {_bytes(share)} of files carried"
                if why is not None:
                    too_big.append({"name": path, "type": "file", "why": why})
                    continue
                data = bytearray(info.st_size)
                got = handle.readinto(data) or 0
                del data[got:]
                files[os.path.relpath(path, SCRATCH)] = (stat.S_IMODE(info.st_mode), data)
                budget -= got
    return files, too_big


def _put_files(files: object, failed: "list[Json]") -> None:
    """The files a cell above left in SCRATCH, written back before this cell runs."""
    if not isinstance(files, dict):
        return
    for relative, content in files.items():
        path = os.path.normpath(os.path.join(SCRATCH, str(relative)))
        if not path.startswith(SCRATCH + "/") or not isinstance(content, tuple) or len(content) != 2:
            continue
        mode, data = content
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o755)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except FileExistsError:
            continue  # the sandbox made it already (the cell's own script is never carried)
        except OSError as exc:
            _fail(failed, path, exc.strerror or str(exc))


def _bytes(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size} bytes"


def _within(inputs: "list[str]", budget: int) -> "list[str]":
    """The inputs, the oldest emptied (their places kept: In[n] stays cell n's) past `budget` bytes."""
    kept, size = list(inputs), 0
    for n in range(len(kept) - 1, 0, -1):
        size += len(kept[n].encode("utf-8", "surrogatepass"))
        if size > budget:
            kept[1 : n + 1] = [""] * n
            break
    return kept


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _is_out(name: str) -> bool:
    return re.fullmatch(r"Out\[\d+\]", name) is not None


def _strings(value: object) -> "list[str] | None":
    """The value if it is a list of strings (as the state's header should have it), else None."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def _chdir(path: object) -> None:
    """The working directory a cell left (`%cd`, os.chdir), where it is still there."""
    if isinstance(path, str) and os.path.isdir(path):
        try:
            os.chdir(path)
        except OSError:
            pass


def _import_modules(modules: "dict[str, str]", failed: "list[Json]") -> "Json":
    """The modules the cells' names were bound to, imported again as the cells' own code imports
    them: the image's finder lets only the program's code (__main__) import a module from /input."""
    imported: Json = {}
    code = compile("__import__(module)", "<restoring the state>", "eval")
    for name, module in modules.items():
        try:
            eval(code, {"__name__": "__main__", "__builtins__": builtins, "module": module})  # noqa: S307 - a constant expression
            imported[name] = sys.modules[module]
        except Exception as exc:
            _fail(failed, name, words(exc))
    return imported


def _out_of_memory() -> None:
    """The state does not fit: the cell cannot run as it was asked to. Where the kernel's OOM
    killer did not end it first (in a microVM, an allocation simply fails), it ends as the OOM
    killer would: SIGKILL, with the restoring marker still there, so the host says memory_limit
    and that the restored state is why."""
    import signal

    _say("the state does not fit in this cell's memory")
    os.kill(os.getpid(), signal.SIGKILL)


def _fail(failed: "list[Json]", name: str, why: str) -> None:
    _say(f"could not restore `{name}`: {why}")
    failed.append({"name": name, "why": why})


def _why_not_carried(value: object) -> "str | None":
    """In a person's words, why a value that lives only in this process cannot go to the next cell."""
    import _thread
    import types

    if isinstance(value, io.IOBase):
        return "open file"
    if isinstance(value, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "generator"
    if isinstance(value, (_thread.LockType, _thread.RLock)):
        return "lock"
    for module, kind, why in (("socket", "socket", "socket"), ("threading", "Thread", "thread")):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(value, getattr(loaded, kind)):
            return why
    return None


def _why_not_in_out(value: object) -> "str | None":
    """What a plotting call returned (a list of lines, an axis, a figure): Out keeps it in a kernel,
    but carried it would bring its whole figure back into every later cell; the figure was shown,
    and a name that holds it carries it."""
    artist = sys.modules.get("matplotlib.artist")
    container = sys.modules.get("matplotlib.container")
    if artist is None:
        return None
    kinds = tuple(k for k in (artist.Artist, getattr(container, "Container", None)) if k is not None)
    if isinstance(value, kinds) or (
        type(value) in (list, tuple) and any(isinstance(item, kinds) for item in value[:8])  # type: ignore[index]
    ):
        return "a plot's result: shown, not carried (its figure would come back with it)"
    return None


def _live_namespace(shell: "CellShell") -> "Callable[[type], type]":
    """cloudpickle's pickler, but a function the cells defined keeps the live namespace as its
    globals, not copies of the names it uses (they are saved once each, under their own names)."""
    namespace = shell.user_ns

    def adapt(base: type) -> type:
        if not hasattr(base, "_dynamic_function_reduce"):  # another cloudpickle: its own way
            return base

        class CellPickler(base):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                self.globals_ref[id(namespace)] = _LiveNamespace()

            def _dynamic_function_reduce(self, func: "Any") -> "Any":
                reduced = super()._dynamic_function_reduce(func)
                if func.__globals__ is not namespace or len(reduced) < 3 or len(reduced[1]) < 1:
                    return reduced
                make, newargs, (state, slots), *rest = reduced
                uses = slots.get("__globals__", {})
                slots["__globals__"] = {name: value for name, value in uses.items() if name not in namespace}
                return (make, newargs, (state, slots), *rest)

        return CellPickler

    return adapt


class _LiveNamespace:
    """Pickled as the globals of a function the cells defined; loaded as the namespace of the
    cell that loads it (its __main__'s), which is installed before the state is restored."""

    def __reduce__(self) -> "tuple[object, ...]":
        return vars, (_MainModule(),)


class _MainModule:
    def __reduce__(self) -> "tuple[object, ...]":
        return __import__, ("__main__",)


# --- settings a kernel keeps in its modules ------------------------------------------------------


class Setting:
    """A module's global setting the cells may change (a seed, print options, rcParams): read at
    the cell's start and end, carried only when the cells changed it (or it came from the state);
    `pickled` when its value is not JSON."""

    def __init__(self, name: str, module: str, read: "Callable[[Any], object]",
                 write: "Callable[[Any, Any], None]", *, pickled: bool) -> None:  # fmt: skip
        self.name, self.module, self._read, self._write, self.pickled = name, module, read, write, pickled

    def read(self) -> object:
        module = sys.modules.get(self.module)
        return None if module is None else self._read(module)

    def write(self, value: object) -> None:
        self._write(__import__(self.module, fromlist=["_"]), value)


def _numpy_random_state(random: "Any") -> object:
    name, keys, position, has_gauss, cached = random.get_state(legacy=True)
    return [name, [int(k) for k in keys], int(position), int(has_gauss), float(cached)]


def _set_numpy_random_state(random: "Any", value: "Any") -> None:
    import numpy

    name, keys, position, has_gauss, cached = value
    random.set_state((name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached))


def _python_random_state(random: "Any") -> object:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _set_python_random_state(random: "Any", value: "Any") -> None:
    version, internal, gauss = value
    random.setstate((version, tuple(internal), gauss))


def _pandas_options(pandas: "Any") -> object:
    config = pandas._config.config
    changed = {}
    for key, option in config._registered_options.items():
        try:
            value = config.get_option(key, silent=True)
        except Exception:  # noqa: S112 - an option pandas itself cannot read: not carried
            continue
        if value is not option.defval and value != option.defval:
            changed[key] = value
    return changed or None  # as pandas has them: nothing to carry


def _set_pandas_options(pandas: "Any", value: "Any") -> None:
    for key, option in value.items():
        pandas.set_option(key, option)


def _rc_params(matplotlib: "Any") -> object:
    """The rcParams as they are, less what a backend owns (the inline backend sets its own)."""
    return {k: v for k, v in matplotlib.rcParams.items() if k not in ("backend", "backend_fallback", "interactive")}


def _set_rc_params(matplotlib: "Any", value: "Any") -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated keys a style set: said when the cell set them
        matplotlib.rcParams.update(value)


def _warning_filters(warnings: "Any") -> object:
    return list(warnings.filters)


def _set_warning_filters(warnings: "Any", value: "Any") -> None:
    warnings.filters[:] = value
    warnings._filters_mutated()


SETTINGS = (
    Setting("random", "random", _python_random_state, _set_python_random_state, pickled=False),
    Setting("numpy.random", "numpy.random", _numpy_random_state, _set_numpy_random_state, pickled=False),
    Setting("numpy print options", "numpy", lambda numpy: numpy.get_printoptions(),
            lambda numpy, value: numpy.set_printoptions(**value), pickled=True),
    Setting("pandas options", "pandas", _pandas_options, _set_pandas_options, pickled=True),
    Setting("matplotlib settings", "matplotlib", _rc_params, _set_rc_params, pickled=True),
    Setting("warnings filters", "warnings", _warning_filters, _set_warning_filters, pickled=True),
)  # fmt: skip


# --- the manifest --------------------------------------------------------------------------------


def _variables(kept: "list[tuple[str, object]]") -> "list[Json]":
    """The names carried: their type and size, and the first rows of (the first few) data frames."""
    import json

    pandas = sys.modules.get("pandas")
    described, tables, table_bytes = [], 0, 0
    for name, value in kept:
        entry = _describe(name, value)
        if pandas is not None and isinstance(value, pandas.DataFrame) and tables < VARIABLE_TABLES:
            try:
                table = cordon_shell.table(value, VARIABLE_TABLE_ROWS)
            except Exception as exc:
                _say(f"a table of `{name}` could not be made: {words(exc)}")
                table = None
            size = len(json.dumps(table))
            if table is not None and table_bytes + size <= VARIABLE_TABLES_MAX_BYTES:
                entry["table"], tables, table_bytes = table, tables + 1, table_bytes + size
        described.append(entry)
    return described


def _describe(name: str, value: object) -> "Json":
    kind = type(value)
    return {
        "name": name,
        "type": _type_name(value),
        "module": str(getattr(kind, "__module__", "")),
        "shape": _shape(value),
        "length": _length(value),
        "bytes": _memory(value),
        "table": None,
    }


def _type_name(value: object) -> str:
    return str(getattr(type(value), "__qualname__", type(value).__name__))


def _shape(value: object) -> "list[int] | None":
    if getattr(type(value), "shape", None) is None:  # on the type: no instance __getattr__ asked
        return None
    try:
        shape = value.shape  # type: ignore[attr-defined]
    except Exception:
        return None
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return list(shape)
    return None


def _length(value: object) -> "int | None":
    if getattr(type(value), "__len__", None) is None:
        return None
    try:
        return len(value)  # type: ignore[arg-type]
    except Exception:
        return None


def _memory(value: object) -> "int | None":
    pandas, numpy = sys.modules.get("pandas"), sys.modules.get("numpy")
    try:
        if pandas is not None and isinstance(value, pandas.DataFrame):
            return int(value.memory_usage(deep=False).sum())
        if pandas is not None and isinstance(value, pandas.Series):
            return int(value.memory_usage(deep=False))
        if numpy is not None and isinstance(value, numpy.ndarray):
            return int(value.nbytes)
        return sys.getsizeof(value)
    except Exception:
        return None


# --- completion ----------------------------------------------------------------------------------


def _completion(kept: "list[tuple[str, object]]") -> "Json":
    """What the editor may complete after a carried name, read without running the cell again:
    {"names": {name: {"attributes": [[attribute, kind]], "signature"?, "doc"?}}, "types": {"module.
    qualname": [[attribute, kind]]}}. A name's own attributes are a frame's columns, a dict's string
    keys, an instance's attributes; its type's are read from the class (inspect.getattr_static, so
    no property runs). Names and signatures only, never a value."""
    import inspect

    names: dict[str, Json] = {}
    types: dict[str, list[list[str]]] = {}
    for name, value in kept[:COMPLETION_NAMES]:
        kind = type(value)
        key = f"{getattr(kind, '__module__', '')}.{_type_name(value)}"
        if key not in types and len(types) < COMPLETION_TYPES and not key.startswith("builtins."):
            types[key] = _class_attributes(inspect, kind)  # the image's index has the builtins
        entry: Json = {"attributes": _own_attributes(value)}
        if callable(value):
            entry.update(_signature(inspect, value))
        names[name] = entry
    return {"names": names, "types": types}


def _class_attributes(inspect: "Any", kind: type) -> "list[list[str]]":
    out = []
    try:
        listed = dir(kind)
    except Exception:
        return []
    for name in listed:
        if not isinstance(name, str) or _dunder(name) or len(name) > COMPLETION_NAME_CHARS:
            continue
        try:
            found = inspect.getattr_static(kind, name)
        except Exception:  # noqa: S112 - a class whose __dir__ names what it does not have
            continue
        if isinstance(found, property):
            out.append([name, "property"])
        elif isinstance(found, (staticmethod, classmethod)) or callable(found):
            out.append([name, "class" if isinstance(found, type) else "method"])
        else:
            out.append([name, "attribute"])
        if len(out) >= COMPLETION_ATTRIBUTES:
            break
    return out


def _own_attributes(value: object) -> "list[list[str]]":
    """A frame's columns, a dict's string keys, an instance's attributes (its __dict__'s keys)."""
    import itertools

    pandas = sys.modules.get("pandas")
    keys: list[object] = []
    kind = "attribute"
    try:
        if pandas is not None and isinstance(value, pandas.DataFrame):
            keys, kind = list(value.columns[:COMPLETION_ATTRIBUTES]), "column"
        elif isinstance(value, dict):
            keys, kind = list(itertools.islice(value, COMPLETION_ATTRIBUTES)), "key"
        elif not isinstance(value, type) and isinstance(getattr(value, "__dict__", None), dict):
            keys = list(itertools.islice(value.__dict__, COMPLETION_ATTRIBUTES))
    except Exception:
        return []
    return [[key, kind] for key in keys if isinstance(key, str) and len(key) <= COMPLETION_NAME_CHARS]


def _signature(inspect: "Any", value: object) -> "Json":
    out: Json = {}
    try:
        out["signature"] = str(inspect.signature(value))[:COMPLETION_TEXT_CHARS]
    except Exception:  # noqa: S110 - a builtin without one, or a class whose __signature__ fails
        pass
    doc = getattr(value, "__doc__", None)
    if isinstance(doc, str) and doc.strip():
        out["doc"] = doc.strip().splitlines()[0][:COMPLETION_TEXT_CHARS]
    return out


def _write_manifest(session: Session, manifest: "Json") -> None:
    """cell.json, within its cap: the variables' tables go first, then what the editor completes,
    then (with a great many names) the lists of names, which are counted instead."""
    import json

    data = json.dumps(manifest).encode()
    if len(data) > MANIFEST_MAX_BYTES:
        for variable in manifest["variables"]:
            variable["table"] = None
        data = json.dumps(manifest).encode()
    if len(data) > MANIFEST_MAX_BYTES:
        manifest["completion"] = {"names": {}, "types": {}}
        data = json.dumps(manifest).encode()
    if len(data) > MANIFEST_MAX_BYTES:
        manifest["variables_dropped"] = len(manifest["variables"]) + len(manifest["not_carried"])
        manifest.update(variables=[], not_carried=[])
        data = json.dumps(manifest).encode()
    try:
        session.write(MANIFEST_FILE, [data])
    except OSError as exc:
        _say(f"could not write {MANIFEST_FILE} ({exc.strerror})")


# --- words ---------------------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    """At most `limit` bytes of UTF-8, with a marker where it was cut."""
    if len(text) * 4 <= limit:
        return text
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    marker = f"\n[... cut: {len(encoded)} bytes in all]"
    return encoded[: limit - len(marker)].decode("utf-8", "ignore") + marker


def _say(line: str) -> None:
    try:
        print(f"cordon: {line}", file=sys.stderr, flush=True)
    except Exception:  # noqa: S110 - stderr closed: nowhere to say it
        pass
