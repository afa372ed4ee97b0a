"""The IPython shell a notebook cell runs in: IPython's own InteractiveShell, so its transformers
(magics, `!`), display formatter and tracebacks are IPython's, with what a Jupyter kernel
(ipykernel) adds to it: displays and the displayed result go to the cell's record (a Sink) instead
of a terminal, matplotlib's inline backend is the default, `?` help is a display, a traceback is an
error the cell records. Cordon adds its table of a data frame to the display formatter, answers
%pip and %conda (packages come from the image), and refuses in words the magics that would reach
outside the cell's sandbox.

A shell is made once per process (make_shell): in a ready sandbox before its run is known (it has
run nothing of anyone's), else by the cell program itself.
"""

import os
import sys
import types


def _embed(*args: object, **kwargs: object) -> object:
    """IPython.embed, loaded when a cell calls it (the real module is imported then)."""
    from IPython.terminal.embed import embed  # type: ignore[import-not-found, unused-ignore]

    return embed(*args, **kwargs)


# IPython's package imports its terminal (prompt_toolkit: 300 modules, about 80 ms) for its `embed`,
# which a cell rarely calls: while IPython is imported, that one module is a stand-in whose `embed`
# loads the real one; then it is forgotten, and an import of it loads the real module.
# Likewise jedi (about 35 ms), which IPython's completer would load for Tab completion, which a
# cell never asks for: the completer is imported as if jedi were absent (its own fallback), and a
# cell's `import jedi` finds it as usual.
if "IPython" not in sys.modules:
    _stand_in = types.ModuleType("IPython.terminal.embed")
    _stand_in.embed = _embed  # type: ignore[attr-defined]
    _absent = "jedi" not in sys.modules
    sys.modules["IPython.terminal.embed"] = _stand_in
    if _absent:
        sys.modules["jedi"] = None  # type: ignore[assignment]
    try:
        import IPython
        import IPython.core.completer  # noqa: F401
    finally:
        if sys.modules.get("IPython.terminal.embed") is _stand_in:
            del sys.modules["IPython.terminal.embed"]
        if _absent and sys.modules.get("jedi", False) is None:
            del sys.modules["jedi"]

from cordon_state import short, text  # noqa: E402
from IPython.core.compilerop import CachingCompiler  # noqa: E402
from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.core.formatters import BaseFormatter  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.core.magic import Magics, line_magic, magics_class  # noqa: E402
from IPython.core.profiledir import ProfileDir  # noqa: E402
from traitlets import ObjectName, Type, Unicode, observe  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    Json = dict[str, Any]

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
PROFILE = "/tmp/.ipython/profile_default"  # HOME is /tmp in a sandbox: where IPython would make it
TABLE_MIME = "application/vnd.cordon.table+json"
TABLE_ROWS, TABLE_COLUMNS = 500, 50
# GUI backends a notebook asks for that a sandbox has no window for: shown inline, as Jupyter's
# default is, and said.
GUI_AS_INLINE = frozenset(
    {"auto", "widget", "ipympl", "notebook", "nbagg", "qt", "qt4", "qt5", "qt6", "tk", "gtk", "gtk3", "gtk4",
     "wx", "osx", "macosx", "pyglet", "glut"}
)  # fmt: skip
# How an operator adds a package: an environment's recipe (the README's Guest images section).
ADD_ONE = "images/<environment>/requirements.txt or recipe.toml, then `make images`"


class Sink:
    """Where a cell's displays and error go; the cell program gives the shell its own (cordon_cell)."""

    def display(self, data: "Json", metadata: "Json", *, result: "int | None" = None,
                display_id: "str | None" = None, update: bool = False) -> None:  # fmt: skip
        pass

    def clear(self) -> None:
        pass

    def error(self, ename: str, evalue: str, traceback: "list[str]", exc: "BaseException | None") -> None:
        pass


def flush_streams() -> None:
    """What was printed before a display or an error is written first, as Jupyter orders them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: S110 - a stream the program closed: nothing to flush
            pass


class CellDisplayPublisher(DisplayPublisher):
    def publish(self, data: "Json", metadata: "Json | None" = None, source: object = None, *,
                transient: "Json | None" = None, update: bool = False, **kwargs: object) -> None:  # fmt: skip
        self._validate_data(data, metadata)
        flush_streams()
        display_id = (transient or {}).get("display_id")
        self.shell.sink.display(data, metadata or {}, display_id=display_id, update=update)

    def clear_output(self, wait: bool = False) -> None:
        flush_streams()
        self.shell.sink.clear()


class CellDisplayHook(DisplayHook):
    """The cell's result (a bare last expression): IPython's own hook (`_`, `__`, `___`, `_N`, Out,
    the `;` that silences it), recorded instead of printed after an `Out[n]:` prompt."""

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict: "Json", md_dict: "Json | None" = None) -> None:
        flush_streams()
        self.shell.sink.display(format_dict, md_dict or {}, result=self.prompt_count)

    def finish_displayhook(self) -> None:
        pass


class _Profile(ProfileDir):
    """IPython's profile folder, made only when something writes there (%store, %bookmark): a
    shell made in a ready sandbox leaves nothing in the run's /tmp."""

    @observe("location")
    def _location_changed(self, change: "Json") -> None:
        location = change["new"]
        self.security_dir = os.path.join(location, self.security_dir_name)
        self.log_dir = os.path.join(location, self.log_dir_name)
        self.startup_dir = os.path.join(location, self.startup_dir_name)
        self.pid_dir = os.path.join(location, self.pid_dir_name)
        self.static_dir = os.path.join(location, self.static_dir_name)

    # The parent's observers of the same names made each folder; these replace them.
    def check_log_dir(self, change: object = None) -> None:
        pass

    def check_startup_dir(self, change: object = None) -> None:
        pass

    def check_security_dir(self, change: object = None) -> None:
        pass

    def check_pid_dir(self, change: object = None) -> None:
        pass


class _LazyDB:
    """IPython's key-value store (%store, %bookmark), opened (and its folder made) on first use."""

    def __init__(self, path: str) -> None:
        self._path, self._db = path, None

    def __getattr__(self, name: str) -> object:
        if self._db is None:
            from pickleshare import PickleShareDB  # type: ignore[import-not-found, unused-ignore]

            self._db = PickleShareDB(self._path)
        return getattr(self._db, name)

    def __getitem__(self, key: str) -> object:
        return self.__getattr__("__getitem__")(key)  # type: ignore[operator]

    def __setitem__(self, key: str, value: object) -> None:
        self.__getattr__("__setitem__")(key, value)  # type: ignore[operator]

    def __delitem__(self, key: str) -> None:
        self.__getattr__("__delitem__")(key)  # type: ignore[operator]


class CellCompiler(CachingCompiler):
    """Names a cell's code as ipykernel does, so a warning or a SyntaxError that names the cell's
    file reads as in Jupyter: a file of the kernel's temp folder named by a hash of the cell."""

    def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
        return f"/tmp/ipykernel_{os.getpid()}/{_murmur2(raw_code)}.py"


def _murmur2(text: str, seed: int = 0xC70F6907) -> int:
    """MurmurHash2 (x86, 32 bit) of the text's UTF-8, with ipykernel's seed (ipykernel.compiler)."""
    data = text.encode("utf-8")
    m, length = 0x5BD1E995, len(data)
    h = seed ^ length
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[end:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


class CellShell(InteractiveShell):
    displayhook_class = Type(CellDisplayHook)
    display_pub_class = Type(CellDisplayPublisher)
    compiler_class = Type(CellCompiler)

    def __init__(self, **kwargs: object) -> None:
        import IPython.core.interactiveshell as module

        self.sink = Sink()
        real = module.PickleShareDB
        module.PickleShareDB = _LazyDB
        try:
            super().__init__(**kwargs)
        finally:
            module.PickleShareDB = real

    def init_virtualenv(self) -> None:
        pass  # as ipykernel: a sandbox's interpreter is the image's, never a virtualenv's

    def enable_gui(self, gui: "str | None" = None) -> None:
        if gui not in (None, "inline"):
            raise UsageError(f"a sandbox has no display for a {gui} event loop: figures are shown inline")

    def _showtraceback(self, etype: type, evalue: BaseException, stb: "list[str]") -> None:
        """As ipykernel: the traceback (IPython's, with its colours) is the cell's error; it is
        also written to stderr, the run's log, where the run's page shows it."""
        flush_streams()
        self.sink.error(etype.__name__, text(evalue), list(stb), evalue)  # first: where stderr is now
        shown = self.InteractiveTB.stb2text(stb)
        try:
            print(shown, file=sys.stderr, flush=True)
        except UnicodeEncodeError:
            print(shown.encode("utf-8", "backslashreplace").decode(), file=sys.stderr, flush=True)

    def show_usage_error(self, exc: BaseException) -> None:
        flush_streams()
        self.sink.error("UsageError", text(exc), [], exc)
        print(f"UsageError: {exc}", file=sys.stderr, flush=True)

    def system_piped(self, cmd: str) -> None:
        """`!cmd` under a pseudo-terminal, as in Jupyter; where the sandbox has none, piped."""
        if _has_pty():
            return super().system_piped(cmd)  # type: ignore[no-any-return]
        self.user_ns["_exit_code"] = self.system_raw(self.var_expand(cmd, depth=1))
        return None

    system = system_piped


_pty: "list[bool]" = []


def _has_pty() -> bool:
    if not _pty:
        try:
            primary, secondary = os.openpty()
        except OSError:
            _pty.append(False)
        else:
            os.close(primary)
            os.close(secondary)
            _pty.append(True)
    return _pty[0]


# --- Cordon's table of a data frame --------------------------------------------------------------


class TableFormatter(BaseFormatter):
    """A pandas frame or series as Cordon's table (its first rows, typed), beside IPython's text
    and HTML: the page draws the table, an export keeps IPython's own."""

    format_type = Unicode(TABLE_MIME)
    print_method = ObjectName("_repr_cordon_table_")  # no object has it: only the types below
    _return_type = dict


def table(obj: object, rows: int = TABLE_ROWS) -> "Json | None":
    """A pandas frame or series as its first rows and columns of JSON values, None for anything else."""
    pandas = sys.modules.get("pandas")  # never imported here: a frame exists only if pandas is loaded
    if pandas is None or not isinstance(obj, (pandas.DataFrame, pandas.Series)):
        return None
    if isinstance(obj, pandas.DataFrame):
        head = obj.iloc[:rows, :TABLE_COLUMNS]
        columns, dtypes = [short(column) for column in head.columns], [str(dtype) for dtype in head.dtypes]
        values: Any = head.itertuples(index=False, name=None)
    else:
        head = obj.iloc[:rows]
        columns, dtypes = ["" if obj.name is None else short(obj.name)], [str(obj.dtype)]
        values = ((value,) for value in head)
    missing = (None, pandas.NaT, pandas.NA)
    return {
        "columns": columns,
        "index": [short(label) for label in head.index],
        "dtypes": dtypes,
        "rows": [[_json_value(value, missing) for value in row] for row in values],
        "total_rows": len(obj),
        "total_columns": obj.shape[1] if isinstance(obj, pandas.DataFrame) else 1,
    }


def _json_value(value: object, missing: "tuple[object, ...]") -> object:
    """A table's cell: a missing value null, a number a number (a non-finite one its text), a
    timestamp ISO 8601, anything else its text, at most 200 characters long (cordon_state.short)."""
    if any(value is nothing for nothing in missing):
        return None
    if isinstance(value, str):
        return short(value)
    if isinstance(value, float):  # numpy's float64 too
        if value != value:
            return None
        return value if value - value == 0 else str(value)
    if isinstance(value, (bool, int)):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        item = value.item()  # numpy's other scalars, as python's
        return _json_value(item, missing) if type(item).__module__ != "numpy" else short(item)
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        try:
            return short(isoformat())
        except Exception:  # noqa: S110 - shown as its text instead
            pass
    return short(value)


# --- magics --------------------------------------------------------------------------------------


@magics_class
class CordonMagics(Magics):
    """Magics that mean something else in a sandbox than in a kernel on someone's machine."""

    @line_magic
    def matplotlib(self, line: str = "") -> object:
        words = line.split()
        if words and words[0].lower() in GUI_AS_INLINE:
            _say(f"%matplotlib {words[0]}: figures are shown inline here, as images under the cell "
                 "(a sandbox has no window to draw in)")  # fmt: skip
            line = " ".join(["inline", *words[1:]])
        return self.shell.magics_manager.registry["PylabMagics"].matplotlib(line)

    @line_magic
    def pip(self, line: str = "") -> None:
        _packages("pip", line)

    @line_magic
    def conda(self, line: str = "") -> None:
        _packages("conda", line)

    @line_magic
    def mamba(self, line: str = "") -> None:
        _packages("mamba", line)

    @line_magic
    def load_ext(self, module_str: str = "") -> object:
        import importlib.util

        name = module_str.strip()
        found = False
        for candidate in (name, f"IPython.extensions.{name}"):  # where IPython looks, in its order
            try:
                found = found or (bool(name) and importlib.util.find_spec(candidate) is not None)
            except (ImportError, ValueError):
                pass
        if name and not found:
            raise UsageError(f"%load_ext {name}: refused: there is no module {name!r} in this sandbox's image, "
                             "and a cell cannot install one")  # fmt: skip
        return self.shell.magics_manager.registry["ExtensionMagics"].load_ext(module_str)

    @line_magic
    def connect_info(self, line: str = "") -> None:
        raise UsageError(_NO_KERNEL.format("%connect_info"))

    @line_magic
    def qtconsole(self, line: str = "") -> None:
        raise UsageError(_NO_KERNEL.format("%qtconsole"))

    @line_magic
    def gui(self, line: str = "") -> None:
        raise UsageError("%gui: refused: a sandbox has no display for an event loop; figures are shown inline")

    @line_magic
    def edit(self, line: str = "") -> None:
        raise UsageError("%edit: refused: a sandbox has no editor; edit the cell itself")


_NO_KERNEL = ("{}: refused: there is no kernel to connect to; each cell runs once, in a sandbox of its own, "
              "and only its state carries to the next")  # fmt: skip


def _packages(tool: str, line: str) -> None:
    """%pip and %conda: a sandbox has no network and its packages are its image's."""
    args = line.split()
    if args[:1] in (["list"], ["freeze"]):
        for name, version in sorted(_installed().items(), key=lambda item: item[0].lower()):
            print(f"{name}=={version}" if args[0] == "freeze" else f"{name} {version}")
        return
    installed: dict[str, str] = {name.lower().replace("_", "-"): v for name, v in _installed().items()}
    _say(f"%{tool}: packages come from this sandbox's image, which has no network to install from")
    wanted = [arg for arg in args[1:] if not arg.startswith("-")] if args[:1] in (["install"], ["show"]) else []
    for requirement in wanted:
        name = requirement.split("[")[0]
        for mark in "<>=!~; ":
            name = name.split(mark)[0]
        key = name.lower().replace("_", "-")
        found, elsewhere = installed.get(key), _elsewhere().get(key)
        if found is not None:
            _say(f"  {name} {found} is in the image: import it")
        elif elsewhere:
            _say(f"  {name} is not in this environment; it is in: {', '.join(elsewhere)} (choose the notebook's "
                 "environment; an assignment's is its instructor's)")  # fmt: skip
        else:
            _say(f"  {name} is in no environment here: ask your operator to add it ({ADD_ONE})")


def _elsewhere() -> "dict[str, list[str]]":
    """Which other environments have which packages, as the run was told (read when asked: a ready
    interpreter imported this module before its run's environment came)."""
    told = os.environ.get("CORDON_PACKAGES_ELSEWHERE", "")
    pairs = (item.partition("=") for item in told.split(";"))
    return {name: places.split(",") for name, _, places in pairs if name and places}


def _installed() -> "dict[str, str]":
    from importlib import metadata

    return {dist.metadata["Name"]: dist.version for dist in metadata.distributions() if dist.metadata["Name"]}


def _pager(shell: CellShell, data: object, start: int = 0, screen_lines: int = 0) -> None:
    """`?` and `??` help, %pinfo and other paged text: a display under the cell (ipykernel pages it)."""
    bundle = data if isinstance(data, dict) else {"text/plain": str(data)}
    flush_streams()
    shell.sink.display(bundle, {})


# --- making one ----------------------------------------------------------------------------------


def make_shell() -> CellShell:
    """The process's shell, made once: the history in memory, nothing written until something asks
    to, Cordon's table and magics, the pager a display."""
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = CellShell.instance(config=config, profile_dir=_Profile(location=PROFILE))
    formatter = shell.display_formatter
    tables = TableFormatter(parent=formatter)
    for module, name in (("pandas.core.frame", "DataFrame"), ("pandas.core.series", "Series")):
        tables.for_type_by_name(module, name, table)
    formatter.formatters[TABLE_MIME] = tables
    shell.register_magics(CordonMagics)
    shell.set_hook("show_in_pager", _pager)
    shell.transform_cell("pass\n")  # compiles tokenize's patterns (5 ms), here rather than in the cell
    return shell  # type: ignore[no-any-return]


def inline_figures(shell: CellShell) -> None:
    """matplotlib's inline backend, as a Jupyter kernel starts: now if pyplot is loaded, else when
    it is (its module configures the shell on import, as it finds the backend named)."""
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    if "matplotlib.pyplot" in sys.modules:
        if sys.modules["matplotlib"].get_backend() != INLINE_BACKEND:  # a ready sandbox's is already
            shell.enable_matplotlib("inline")
    else:  # a figure restored from the state shows as an image before pyplot is ever imported
        shell.display_formatter.formatters["image/png"].for_type_by_name("matplotlib.figure", "Figure", _png)


def _png(figure: object) -> object:
    from IPython.core.pylabtools import print_figure

    return print_figure(figure, "png")


def _say(line: str) -> None:
    try:
        print(f"cordon: {line}", file=sys.stderr, flush=True)
    except Exception:  # noqa: S110 - stderr closed: nowhere to say it
        pass
