"""Cordon's python image: the interpreter's startup hook, in place of Debian's link to
/etc/python3.11/sitecustomize.py (an apport hook; there is no apport here). A figure a program
leaves open is saved to /output/figure-<n>.png when it ends, and the run's inputs are modules the
program can import. Byte-compiled when the image is built.

Inputs as modules: `import helper` finds /input/helper.py, through a finder placed last, so the
standard library and the installed packages always come first (an input named json.py shadows
nothing), and only for an import the program's own code makes (its __main__, or a module from
/input): a library's optional import (pandas tries `bottleneck` and `numexpr`) never finds a file
that happens to be among the inputs, so no input runs unless the program asked for it by name.

Nothing of matplotlib is imported here. Until the program imports it, the only cost is a finder
on sys.meta_path that compares each newly imported module's name with two strings; once pyplot's
figure registry has loaded, the finder removes itself and registers the save at exit. It must
register after the registry does: atexit runs handlers last-registered first, and the registry's
own handler closes every figure.
"""

import atexit
import os
import site
import sys

TYPE_CHECKING = False  # typing itself is not imported: it would cost every program's start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import FrameType, ModuleType

OUTPUT_DIR = "/output"
INPUT_DIR = "/input"
DPI = 100
# More than the output caps can take (256 files at most): a program that left a thousand figures
# open would spend its deadline saving files that export refuses.
MAX_FIGURES = 100
_REGISTRY = "matplotlib._pylab_helpers"

# site would next import a `usercustomize` module from anywhere on the path, /input included: a
# file among a run's inputs never runs unless the program imports it.
site.ENABLE_USER_SITE = False


def _save_open_figures() -> None:
    pyplot = sys.modules.get("matplotlib.pyplot")
    # A mount point in a sandbox; in the bare image tree (a chroot) it is the image's own directory.
    if pyplot is None or not os.path.ismount(OUTPUT_DIR):
        return
    try:
        numbers = pyplot.get_fignums()
    except Exception as exc:
        _report("could not list the open figures", exc)
        return
    if len(numbers) > MAX_FIGURES:
        _say(f"saving the first {MAX_FIGURES} of {len(numbers)} open figures")
    for number in numbers[:MAX_FIGURES]:
        try:
            _save(pyplot.figure(number), number)
        except Exception as exc:
            _report(f"could not save figure {number}", exc)


def _save(figure: object, number: int) -> None:
    """Into a file of its own: never over one the program wrote, never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(1, 1000):
        name = f"figure-{number}.png" if attempt == 1 else f"figure-{number}-{attempt}.png"
        path = os.path.join(OUTPUT_DIR, name)
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as handle:
                figure.savefig(handle, format="png", dpi=DPI, bbox_inches="tight")  # type: ignore[attr-defined]
        except BaseException:
            os.unlink(path)
            raise
        return
    raise FileExistsError(f"figure-{number}.png and its alternatives exist")


def _report(what: str, exc: BaseException) -> None:
    _say(what + ": " + " ".join(f"{type(exc).__name__}: {exc}".split()))


def _say(line: str) -> None:
    try:
        print(f"cordon: {line}", file=sys.stderr, flush=True)
    except Exception:  # noqa: S110 - stderr closed: nowhere to say it
        pass


class _WatchForPyplot:
    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if name == "matplotlib":
            os.environ.setdefault("MPLBACKEND", "agg")  # headless, without probing for a GUI toolkit
        elif name == _REGISTRY:
            sys.meta_path.remove(self)
            spec = _find_elsewhere(name, path, target)
            if spec is not None:
                _register_after_loading(spec)
            return spec
        return None


def _find_elsewhere(name: str, path: "Sequence[str] | None", target: "ModuleType | None") -> "ModuleSpec | None":
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)  # a program's own finder may have only find_module
        spec: ModuleSpec | None = find(name, path, target) if find is not None else None
        if spec is not None:
            return spec
    return None


def _register_after_loading(spec: "ModuleSpec") -> None:
    loader = spec.loader
    if loader is None:
        return
    exec_module = loader.exec_module

    def exec_then_register(module: "ModuleType") -> None:
        exec_module(module)
        atexit.register(_save_open_figures)

    setattr(loader, "exec_module", exec_then_register)  # noqa: B010 - on this one module's loader only


class _InputModules:
    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if path is not None or not _asked_by_the_program():  # a submodule is its package's business
            return None
        from importlib.machinery import PathFinder  # only once nothing installed had the module

        return PathFinder.find_spec(name, [INPUT_DIR])


def _asked_by_the_program() -> bool:
    """Whether the code that asked for the import is the program's: its __main__ or an input."""
    frame: FrameType | None = sys._getframe(2)  # past this function and find_spec
    while frame is not None and _import_machinery(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return False
    module_file = frame.f_globals.get("__file__") or ""
    return frame.f_globals.get("__name__") == "__main__" or str(module_file).startswith(INPUT_DIR + "/")


def _import_machinery(filename: str) -> bool:
    # importlib's frozen bootstrap, and importlib.import_module's own frame, between the two.
    return filename.startswith("<frozen importlib") or "/importlib/" in filename


sys.meta_path.insert(0, _WatchForPyplot())
sys.meta_path.append(_InputModules())
