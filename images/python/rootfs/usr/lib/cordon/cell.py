"""Cordon's notebook cell program: runs one cell's script as __main__ in its own sandbox, after
restoring the names the cells above left, and leaves its displays and its own names for the next.

    /usr/bin/python3 /usr/lib/cordon/cell.py SCRIPT [ARGS...]

Each cell is a run of its own (runner.cells on the host); state reaches the next cell only as a
file. Environment: CORDON_STATE_MAX_BYTES (the snapshot's cap) and, when there is a state to start
from, CORDON_CELL_STATE (its path, read-only). Both are removed before the script runs. The session
files, in /output/.cordon (made before the script runs, written through its descriptor):

    state      the snapshot, written only when the script succeeded (exit status 0):
                 magic    b"CORDON-STATE 1\\n" (15 bytes)
                 length   the header's length in bytes, 8 bytes unsigned little-endian
                 header   JSON: {"names": [{"name": "df", "pickle": 812, "buffers": [40000, 4000]},
                                           {"name": "b", "same": "a"}, ...],
                                 "modules": {"pd": "pandas"}}
                 blobs    for each name with "pickle", in order: its pickle (protocol 5, cloudpickle),
                          then its out-of-band buffers (numpy's and pandas' arrays), back to back
               One pickle per name, so a value that cannot be saved or restored costs only its own
               name. A name bound to the very object an earlier one is ("same") comes back as that
               object; an object shared *inside* two values comes back as two copies. Modules are
               imported again by name. Over the cap, the file is instead a sparse file of exactly
               cap + 1 bytes, which the host refuses (output_limit).
    cell.json  the manifest (version 1), written last, also when the script failed
    display-<n>.png|jpeg|svg   the images display <n> showed
    restoring  present only while the state is restored: running out of memory there says why

Functions and classes a cell defines are saved by value (cloudpickle), with the namespace of the
cell that loads them as their globals: as in Jupyter, they see that cell's names, not copies of the
names they used when they were saved. Nothing of pandas or numpy is imported here: a frame or an
array exists only once the program (or its state) imported them.
"""

import builtins
import io
import os
import stat
import sys

TYPE_CHECKING = False  # typing itself is not imported: every cell pays for what this imports
if TYPE_CHECKING:
    from ast import Expr
    from collections.abc import Callable, Iterable
    from types import CodeType
    from typing import Any

    Json = dict[str, Any]

KIB = 1024
MIB = 1024 * KIB
SESSION_DIR = "/output/.cordon"
STATE_FILE, MANIFEST_FILE, RESTORING_FILE = "state", "cell.json", "restoring"  # runner.cells' names
MAGIC = b"CORDON-STATE 1\n"
HEADER_MAX_BYTES = 64 * MIB
DEFAULT_STATE_MAX_BYTES = 256 * MIB  # runner.spec.Limits' default, for a cell run by hand
NOT_SAVED = frozenset({"display", "In", "Out", "exit", "quit"})
# Exact types the standard pickler saves as cloudpickle would: cloudpickle costs about 10 ms to
# import (more than a small state's whole save), so only a value of another type imports it.
PLAIN_TYPES = frozenset({int, float, complex, bool, str, bytes, type(None)})
# Where a function an earlier cell defined says it came from: the script's path now names this
# cell's script, whose lines a traceback would show as if they were the function's.
EARLIER_CELL = "<an earlier cell>"

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
TABLE_MIME = "application/vnd.cordon.table+json"
TABLE_ROWS, TABLE_COLUMNS = 500, 50
VARIABLE_TABLE_ROWS, VARIABLE_TABLES, VARIABLE_TABLES_MAX_BYTES = 50, 20, 1 * MIB
SHORT_CHARS = 200  # a table's cell, a reason a name was not carried
IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpeg", "image/svg+xml": "svg"}
# Jupyter's order; a mime type _repr_mimebundle_ gave is not asked for again.
REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
)


def main(argv: "list[str]") -> object:
    """Run the cell; the exit status, as SystemExit takes it."""
    if len(argv) < 2:
        return "usage: cell.py SCRIPT [ARGS...]"
    script, cap, state = argv[1], _state_cap(), os.environ.pop("CORDON_CELL_STATE", None)
    pid = os.getpid()
    sys.argv = argv[1:]
    sys.path[0] = os.path.dirname(os.path.realpath(script))  # as `python3 SCRIPT` has it
    session = Session.make()
    displays = Displays(session)
    builtins.display = _display_function(displays)  # type: ignore[attr-defined]
    namespace = _fresh_main(script)
    restored = None if state is None else restore(namespace, state, session)
    status, error = run(namespace, script, displays)
    if session is None or os.getpid() != pid:  # a child the script forked ends as the script did
        return status
    if not session.is_intact():
        _say(f"{SESSION_DIR} was replaced while the cell ran: its state and displays are not kept")
        return status
    manifest: Json = {"version": 1, "displays": displays.bundles, "displays_dropped": displays.dropped}
    manifest.update(variables=[], not_carried=[], modules={}, restored=restored, error=error, state=None)
    if error is None:  # the script ended well (a failed cell leaves no state)
        try:
            manifest.update(save(namespace, session, cap, script))
        except OSError as exc:
            session.remove(STATE_FILE)
            _say(f"could not write the state ({exc.strerror}); the next cell starts from the state before")
            status = 1
    _write_manifest(session, manifest)
    return status


def _state_cap() -> int:
    try:
        return int(os.environ.pop("CORDON_STATE_MAX_BYTES", DEFAULT_STATE_MAX_BYTES))
    except ValueError:
        return DEFAULT_STATE_MAX_BYTES


def _fresh_main(script: str) -> "Json":
    """A module of its own as __main__, as `python3 SCRIPT` makes: cloudpickle saves what it defines
    by value, and sitecustomize's finder sees the script's imports as the program's."""
    from importlib.machinery import SourceFileLoader

    module = type(sys)("__main__")
    namespace: Json = module.__dict__
    loader = SourceFileLoader("__main__", script)
    namespace.update(__file__=script, __loader__=loader, __cached__=None, __builtins__=builtins)
    sys.modules["__main__"] = module
    return namespace


# --- the session folder --------------------------------------------------------------------------


class Session:
    """/output/.cordon, made before the script runs and written through its descriptor, never
    through a link: the script runs as the same user and may have replaced anything in it."""

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
            _write_all(fd, pieces)
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
        self.remove(name)  # whatever the script left under this name is replaced, never written through
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, flags, 0o644, dir_fd=self.fd)


def _write_all(fd: int, pieces: "Iterable[Any]") -> None:
    """Write bytes-like pieces (large arrays among them) without copying them."""
    views = [view for view in (memoryview(p).cast("B") for p in pieces) if view.nbytes]
    batch = os.sysconf("SC_IOV_MAX")
    while views:
        written = os.writev(fd, views[:batch])
        done = 0
        while done < len(views) and written >= views[done].nbytes:
            written -= views[done].nbytes
            done += 1
        del views[:done]
        if written:
            views[0] = views[0][written:]


# --- restoring the state -------------------------------------------------------------------------


class DamagedState(Exception):
    """The state file is not one this program wrote, or ends early."""


def restore(namespace: "Json", path: str, session: "Session | None") -> "Json":
    """Restore the names a state holds into the namespace, each on its own: one that fails is said
    on stderr and listed, and the others are restored all the same."""
    try:
        file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below, after the marker is made
    except OSError as exc:
        _say(f"could not restore the state: it cannot be opened ({exc.strerror})")
        return {"bytes": 0, "names": 0, "failed": [{"name": "(state)", "why": "the state file cannot be opened"}]}
    if session is not None:
        session.write(RESTORING_FILE, [])
    try:
        with file:
            size = os.fstat(file.fileno()).st_size
            names, failed = _restore_from(file, size, namespace)
    finally:
        namespace["__builtins__"] = builtins  # cloudpickle sets builtins' dict there
        if session is not None:
            session.remove(RESTORING_FILE)
    return {"bytes": size, "names": names, "failed": failed}


def _restore_from(file: "io.FileIO", size: int, namespace: "Json") -> "tuple[int, list[Json]]":
    failed: list[Json] = []
    try:
        header = _read_header(file, size)
    except DamagedState as exc:
        _fail(failed, "(state)", f"the state file is damaged: {exc}")
        return 0, failed
    loaded = _import_modules(header["modules"], failed)
    entries = iter(header["names"])
    for entry in entries:
        name, same = entry["name"], entry.get("same")
        if same is not None:
            if same in loaded:
                loaded[name] = loaded[same]
            else:
                _fail(failed, name, f"it is the value of `{same}`, which was not restored")
            continue
        try:
            loaded[name] = _load(file, size, entry)
        except DamagedState as exc:
            for lost in (entry, *entries):
                _fail(failed, lost["name"], f"the state file is damaged: {exc}")
        except MemoryError:
            _out_of_memory(name)
        except Exception as exc:
            _fail(failed, name, _words(exc))
    namespace.update(loaded)
    return len(loaded), failed


def _out_of_memory(name: str) -> None:
    """The state does not fit: the cell cannot run as it was asked to (without `name` it would run
    on something else). Where the kernel's OOM killer did not end it first (in a microVM, an
    allocation simply fails), it ends as the OOM killer would: SIGKILL, with the restoring marker
    still there, so the host says memory_limit and that the restored state is why."""
    import signal

    _say(f"the state does not fit in this cell's memory (restoring `{name}`)")
    os.kill(os.getpid(), signal.SIGKILL)


def _import_modules(modules: "dict[str, str]", failed: "list[Json]") -> "Json":
    imported: Json = {}
    for name, module in modules.items():
        try:
            __import__(module)
            imported[name] = sys.modules[module]
        except Exception as exc:
            _fail(failed, name, _words(exc))
    return imported


def _load(file: "io.FileIO", size: int, entry: "Json") -> object:
    """One name's value: its pickle, given its out-of-band buffers (read before it runs)."""
    import pickle

    blobs = [_read_exact(file, n, size) for n in (entry["pickle"], *entry["buffers"])]
    return pickle.loads(blobs[0], buffers=blobs[1:])  # noqa: S301 - the user's own state, in the user's sandbox


def _fail(failed: "list[Json]", name: str, why: str) -> None:
    _say(f"could not restore `{name}`: {why}")
    failed.append({"name": name, "why": why})


def _read_header(file: "io.FileIO", size: int) -> "Json":
    import json

    if bytes(_read_exact(file, len(MAGIC), size)) != MAGIC:
        raise DamagedState("it is not a Cordon state")
    length = int.from_bytes(_read_exact(file, 8, size), "little")
    if length > HEADER_MAX_BYTES:
        raise DamagedState("its header is too long")
    try:
        header = json.loads(_read_exact(file, length, size))
    except ValueError:
        raise DamagedState("its header is not JSON") from None
    if not _header_is_valid(header):
        raise DamagedState("its header is not in the expected shape")
    return header  # type: ignore[no-any-return]


def _header_is_valid(header: object) -> bool:
    if not isinstance(header, dict) or not isinstance(header.get("names"), list):
        return False
    modules = header.get("modules")
    if not isinstance(modules, dict) or not all(isinstance(m, str) for m in modules.values()):
        return False
    return all(_entry_is_valid(entry) for entry in header["names"])


def _entry_is_valid(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return False
    if "same" in entry:
        return isinstance(entry["same"], str)
    buffers = entry.get("buffers")
    if not isinstance(buffers, list):
        return False
    return all(isinstance(n, int) and n >= 0 for n in (entry.get("pickle"), *buffers))


def _read_exact(file: "io.FileIO", length: int, size: int) -> bytearray:
    """Read into a buffer of its own: numpy uses a restored array's buffer as it is, no copy."""
    if length > size - file.tell():
        raise DamagedState("it ends early")
    buffer = bytearray(length)
    view, done = memoryview(buffer), 0
    while done < length:
        got = file.readinto(view[done:])
        if not got:
            raise DamagedState("it ends early")
        done += got
    return buffer


# --- running the script --------------------------------------------------------------------------


def run(namespace: "Json", script: str, displays: "Displays") -> "tuple[object, Json | None]":
    """Run the script as python would and show its last expression as Jupyter would: the exit
    status, and the error for the manifest (None when the script ended well)."""
    try:
        body, last = _compile(script)
        exec(body, namespace)  # noqa: S102 - the program is the script; this sandbox is its own
        if last is not None:
            value = eval(last, namespace)  # noqa: S307 - the script's own last expression
            if value is not None:
                displays.show(value)
    except SystemExit as exc:
        if exc.code is None or (isinstance(exc.code, int) and exc.code == 0):
            return exc.code, None
        return exc.code, {"ename": "SystemExit", "evalue": _cut(_text(exc.code), PLAIN_MAX_BYTES), "traceback": []}
    except BaseException as exc:  # as python would, KeyboardInterrupt too
        return 1, _report_error(exc, script)
    return 0, None


def _compile(script: str) -> "tuple[CodeType, CodeType | None]":
    """The script's code, and its last statement's apart when it is an expression to show."""
    import ast

    with open(script, "rb") as handle:
        source = handle.read()
    tree = ast.parse(source, script)
    tail, last = tree.body[-1] if tree.body else None, None
    if isinstance(tail, ast.Expr) and not _silenced(source, tail):
        tree.body.pop()
        last = compile(ast.Expression(tail.value), script, "eval", dont_inherit=True)
    return compile(tree, script, "exec", dont_inherit=True), last


def _silenced(source: bytes, node: "Expr") -> bool:
    """Jupyter's rule: a `;` after the last expression, on its last line, keeps it from being shown."""
    if node.end_lineno is None or node.end_col_offset is None:
        return False
    line = source.splitlines()[node.end_lineno - 1]
    return line[node.end_col_offset :].lstrip().startswith(b";")


def _report_error(exc: BaseException, script: str) -> "Json":
    """Print the traceback as python would, from the script's first frame on, and describe it."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:  # this program's (and ast's)
        tb = tb.tb_next
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)  # the script may have set its own, as python honours
    except Exception:
        sys.__excepthook__(type(exc), exc, tb)
    lines = "".join(traceback.format_exception(type(exc), exc, tb)).splitlines()
    return {"ename": type(exc).__name__, "evalue": _cut(_text(exc), PLAIN_MAX_BYTES), "traceback": _last_lines(lines)}


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


# --- displays ------------------------------------------------------------------------------------


class Displays:
    """What the cell showed, as Jupyter's mime bundles in order, within the manifest's and the
    session files' caps: a display that does not fit is dropped whole and counted."""

    def __init__(self, session: "Session | None") -> None:
        self.session = session
        self.bundles: list[Json] = []
        self.dropped = 0
        self.json_bytes = self.files = self.file_bytes = 0

    def show(self, obj: object) -> None:
        session = self.session
        if session is None:
            return  # nowhere to keep it
        if len(self.bundles) >= DISPLAYS_MAX:
            self.dropped += 1
            return
        import json

        number = len(self.bundles) + 1
        data, images = _mime_bundle(obj, number)
        size, image_bytes = len(json.dumps(data)), sum(len(content) for content in images.values())
        if (
            self.json_bytes + size > DISPLAYS_MAX_BYTES
            or self.files + len(images) > DISPLAY_FILES_MAX
            or self.file_bytes + image_bytes > DISPLAY_FILES_MAX_BYTES
            or not self._write_images(session, images, number)
        ):
            self.dropped += 1
            return
        self.bundles.append({"data": data})
        self.json_bytes, self.files, self.file_bytes = (
            self.json_bytes + size,
            self.files + len(images),
            self.file_bytes + image_bytes,
        )

    def _write_images(self, session: Session, images: "dict[str, bytes]", number: int) -> bool:
        try:
            for name, content in images.items():
                session.write(name, [content])
        except OSError as exc:
            _say(f"display {number} could not be kept ({exc.strerror})")
            for name in images:
                session.remove(name)
            return False
        return True


def _display_function(displays: Displays) -> "Callable[..., None]":
    def display(*objs: object) -> None:
        """Show each object below the cell, as Jupyter's display() does: a pandas frame as a table,
        anything else by the richest of its _repr_*_ methods, and always its repr."""
        for obj in objs:
            displays.show(obj)

    # Pickled by name, as a builtin, wherever a cell's value holds it (never by value).
    display.__module__, display.__qualname__ = "builtins", "display"
    return display


def _mime_bundle(obj: object, number: int) -> "tuple[Json, dict[str, bytes]]":
    """The display's mime bundle, and the images it refers to by file name."""
    data: Json = {"text/plain": _plain_text(obj, number)}
    table = _table(obj, TABLE_ROWS)
    if table is not None:
        data[TABLE_MIME] = table  # the data, not pandas' HTML: the page draws it
        return data, {}
    images = {}
    for mime, value in _rich_reprs(obj, number).items():
        if mime in IMAGE_EXTENSIONS:
            content = _image_bytes(mime, value)
            if content is None:
                _say(f"display {number}: {mime} is neither bytes nor base64 text; left out")
                continue
            name = f"display-{number}.{IMAGE_EXTENSIONS[mime]}"
            images[name], data[mime] = content, {"file": name}
        else:
            kept = _text_or_json(mime, value)
            if kept is None:
                _say(f"display {number}: {mime} is not text or JSON within {TEXT_MAX_BYTES // MIB} MiB; left out")
                continue
            data[mime] = _cut(kept, PLAIN_MAX_BYTES) if isinstance(kept, str) and mime == "text/plain" else kept
    return data, images


def _plain_text(obj: object, number: int) -> str:
    try:
        text = repr(obj)
    except Exception as exc:
        _report(f"display {number}: repr failed", exc)
        text = object.__repr__(obj)
    return _cut(text, PLAIN_MAX_BYTES)


def _rich_reprs(obj: object, number: int) -> "Json":
    if isinstance(obj, type):
        return {}  # a class's _repr_html_ is a function of its instances, not the class's display
    found: Json = {}
    bundle = _call_repr(obj, "_repr_mimebundle_", number, include=None, exclude=None)
    if isinstance(bundle, dict):
        found.update((mime, value) for mime, value in bundle.items() if isinstance(mime, str))
    for method, mime in REPR_METHODS:
        if mime not in found:
            value = _call_repr(obj, method, number)
            if value is not None:
                found[mime] = value
    if "image/png" not in found:
        png = _figure_png(obj, number)
        if png is not None:
            found["image/png"] = png
    return found


def _call_repr(obj: object, name: str, number: int, **kwargs: object) -> object:
    # Looked up on the type, as IPython does: an object answering every attribute is not asked.
    if getattr(type(obj), name, None) is None:
        return None
    try:
        value = getattr(obj, name)(**kwargs)
    except Exception as exc:
        _report(f"display {number}: {name} failed", exc)
        return None
    if isinstance(value, tuple) and len(value) == 2:
        return value[0]  # (data, metadata), which IPython allows
    return value


def _figure_png(obj: object, number: int) -> "bytes | None":
    """A matplotlib figure has no _repr_png_ of its own: IPython's inline backend draws it."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is None or not isinstance(obj, figure.Figure):
        return None
    buffer = io.BytesIO()
    try:
        obj.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    except Exception as exc:
        _report(f"display {number}: the figure could not be drawn", exc)
        return None
    return buffer.getvalue()


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
    """Text, or JSON data (a copy: the program may change its own later), within the cap."""
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


# --- tables --------------------------------------------------------------------------------------


def _table(obj: object, rows: int) -> "Json | None":
    """A pandas frame or series as its first rows and columns of JSON values, None for anything else."""
    pandas = sys.modules.get("pandas")  # never imported here: a frame exists only if pandas is loaded
    if pandas is None or not isinstance(obj, (pandas.DataFrame, pandas.Series)):
        return None
    try:
        if isinstance(obj, pandas.DataFrame):
            head = obj.iloc[:rows, :TABLE_COLUMNS]
            columns, dtypes = [_short(column) for column in head.columns], [str(dtype) for dtype in head.dtypes]
            values: Iterable[Iterable[object]] = head.itertuples(index=False, name=None)
        else:
            head = obj.iloc[:rows]
            columns, dtypes = ["" if obj.name is None else _short(obj.name)], [str(obj.dtype)]
            values = ((value,) for value in head)
        missing = (None, pandas.NaT, pandas.NA)
        return {
            "columns": columns,
            "index": [_short(label) for label in head.index],
            "dtypes": dtypes,
            "rows": [[_json_value(value, missing) for value in row] for row in values],
            "total_rows": len(obj),
            "total_columns": obj.shape[1] if isinstance(obj, pandas.DataFrame) else 1,
        }
    except Exception as exc:
        _report("a table of a data frame could not be made", exc)
        return None


def _json_value(value: object, missing: "tuple[object, ...]") -> object:
    """A table's cell: a missing value null, a number a number (a non-finite one its text), a
    timestamp ISO 8601, anything else its text, at most SHORT_CHARS long."""
    if any(value is nothing for nothing in missing):
        return None
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, float):  # numpy's float64 too
        if value != value:
            return None
        return value if value - value == 0 else str(value)
    if isinstance(value, (bool, int)):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        item = value.item()  # numpy's other scalars, as python's
        return _json_value(item, missing) if type(item).__module__ != "numpy" else _short(item)
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        try:
            return _short(isoformat())
        except Exception:  # noqa: S110 - shown as its text instead
            pass
    return _short(value)


# --- saving the state ----------------------------------------------------------------------------


def save(namespace: "Json", session: Session, cap: int, script: str) -> "Json":
    """Save the script's names to the state, one pickle each; the manifest's account of them."""
    names = [name for name in list(namespace) if _is_saved(name)]
    snapshot = Snapshot(Pickling(namespace, frozenset(names), script))
    for name in names:
        snapshot.add(name, namespace.get(name))
    state = _write_state(session, snapshot.header(), snapshot.blobs, cap)
    modules, not_carried = snapshot.modules, snapshot.not_carried
    return {"variables": _variables(snapshot.kept), "not_carried": not_carried, "modules": modules, "state": state}


def _is_saved(name: object) -> bool:
    return isinstance(name, str) and not name.startswith("_") and name not in NOT_SAVED


class Snapshot:
    """The names being saved: the header's entries and the blobs after it, and for the manifest
    the names kept, those not carried and why, and the modules."""

    def __init__(self, pickling: "Pickling") -> None:
        self.pickling = pickling
        self.entries: list[Json] = []
        self.blobs: list[memoryview] = []
        self.kept: list[tuple[str, object]] = []
        self.not_carried: list[Json] = []
        self.modules: dict[str, str] = {}
        self.first_name_of: dict[int, str] = {}  # by the value's id: a second name is saved as "same"

    def add(self, name: str, value: object) -> None:
        if isinstance(value, type(sys)) and sys.modules.get(value.__name__) is value:
            self.modules[name] = value.__name__  # imported again by name
            return
        why = _why_not_carried(value)
        if why is None and id(value) in self.first_name_of:
            self.entries.append({"name": name, "same": self.first_name_of[id(value)]})
        elif why is None:
            why = self._pickle(name, value)
        if why is not None:
            self.not_carried.append({"name": name, "type": _type_name(value), "why": why})
        else:
            self.kept.append((name, value))

    def header(self) -> "Json":
        return {"names": self.entries, "modules": self.modules}

    def _pickle(self, name: str, value: object) -> "str | None":
        try:
            blobs = self.pickling.dumps(value)
        except Exception as exc:
            return "cannot be pickled: " + _words(exc)
        self.first_name_of[id(value)] = name
        self.entries.append({"name": name, "pickle": blobs[0].nbytes, "buffers": [blob.nbytes for blob in blobs[1:]]})
        self.blobs.extend(blobs)
        return None


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


class Pickling:
    """Pickles one value at a time, its large buffers out of band (not copied)."""

    def __init__(self, namespace: "Json", names: "frozenset[str]", script: str) -> None:
        self.namespace, self.names, self.script = namespace, names, script
        self.pickler: Any = None

    def dumps(self, value: object) -> "list[memoryview]":
        if type(value) in PLAIN_TYPES:
            import pickle

            return [memoryview(pickle.dumps(value, protocol=5))]
        if self.pickler is None:
            self.pickler = _cell_pickler(self.namespace, self.names, self.script)
        buffers: list[Any] = []
        file = io.BytesIO()
        self.pickler(file, protocol=5, buffer_callback=buffers.append).dump(value)
        return [file.getbuffer(), *(buffer.raw() for buffer in buffers)]


class _LiveNamespace:
    """Pickled as the globals of a function the cells defined; loaded as the namespace of the
    cell that loads it (its __main__'s), which is installed before the state is restored."""

    def __reduce__(self) -> "tuple[object, ...]":
        return vars, (_MainModule(),)


class _MainModule:
    def __reduce__(self) -> "tuple[object, ...]":
        return __import__, ("__main__",)


def _cell_pickler(namespace: "Json", names: "frozenset[str]", script: str) -> "Any":
    """cloudpickle's pickler, but a function the cells defined keeps the live namespace as its
    globals, not copies of the names it uses (they are saved once each, under their own names)."""
    import cloudpickle  # type: ignore[import-not-found, unused-ignore]

    base = cloudpickle.CloudPickler
    if not hasattr(base, "_dynamic_function_reduce"):  # another cloudpickle: its own way
        return base

    class CellPickler(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.globals_ref[id(namespace)] = _LiveNamespace()

        def _dynamic_function_reduce(self, func: "Any") -> "Any":
            reduced = super()._dynamic_function_reduce(func)
            if func.__globals__ is not namespace or len(reduced) < 3 or len(reduced[1]) < 1:
                return reduced
            make, (code, *newargs), (state, slots), *rest = reduced
            uses = slots.get("__globals__", {})
            slots["__globals__"] = {name: value for name, value in uses.items() if name not in names}
            return (make, (_relabelled(code, script), *newargs), (state, slots), *rest)

    return CellPickler


def _relabelled(code: "CodeType", script: str) -> "CodeType":
    if code.co_filename != script:
        return code
    consts = tuple(_relabelled(c, script) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=EARLIER_CELL, co_consts=consts)


def _write_state(session: Session, header: "Json", blobs: "list[memoryview]", cap: int) -> "Json":
    import json

    encoded = json.dumps(header, separators=(",", ":")).encode()
    total = len(MAGIC) + 8 + len(encoded) + sum(blob.nbytes for blob in blobs)
    if total > cap:
        # The host refuses a state over its cap and ends the run output_limit; a sparse file one
        # byte over says so without writing (or holding) the data.
        session.write_sparse(STATE_FILE, cap + 1)
        return {"bytes": total, "over_cap": True}
    session.write(STATE_FILE, [MAGIC, len(encoded).to_bytes(8, "little"), encoded, *blobs])
    return {"bytes": total, "over_cap": False}


def _variables(kept: "list[tuple[str, object]]") -> "list[Json]":
    """The names carried: their type and size, and the first rows of (the first few) data frames."""
    import json

    pandas = sys.modules.get("pandas")
    described, tables, table_bytes = [], 0, 0
    for name, value in kept:
        entry = _describe(name, value)
        if pandas is not None and isinstance(value, pandas.DataFrame) and tables < VARIABLE_TABLES:
            table = _table(value, VARIABLE_TABLE_ROWS)
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


# --- the manifest --------------------------------------------------------------------------------


def _write_manifest(session: Session, manifest: "Json") -> None:
    """cell.json, within its cap: the variables' tables go first, then (with a great many names)
    the lists of names, which are counted instead."""
    import json

    data = json.dumps(manifest).encode()
    if len(data) > MANIFEST_MAX_BYTES:
        for variable in manifest["variables"]:
            variable["table"] = None
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


def _short(value: object) -> str:
    text = _text(value)
    return text if len(text) <= SHORT_CHARS else text[: SHORT_CHARS - 1] + "…"


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return object.__repr__(value)


def _words(exc: BaseException) -> str:
    """An exception on one short line: `ValueError: what it said`."""
    return _short(" ".join(f"{type(exc).__name__}: {_text(exc)}".split()))


def _report(what: str, exc: BaseException) -> None:
    _say(f"{what}: {_words(exc)}")


def _say(line: str) -> None:
    try:
        print(f"cordon: {line}", file=sys.stderr, flush=True)
    except Exception:  # noqa: S110 - stderr closed: nowhere to say it
        pass


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
