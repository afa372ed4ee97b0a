"""The index a notebook's editor completes module members from (playground.completion), made once
when the image is built (runner.images.build.index_modules runs `python3 cordon_index.py OUT` in
the built tree) and kept in it, so the image's digest covers it. Never run in a sandbox.

OUT is JSON: {"modules": {module: [[member, kind, signature, doc, ref?]]}, "classes": {"module.
qualname": [[attribute, kind, signature, doc]]}, "importable": [top-level module names]}: for each
module of MODULES its public members (its __all__, else the names without a leading underscore),
kind one of module, class, function, variable, with a callable's signature and the first line of
its documentation; a member that is a module or a class names it in ref, and every such class is
indexed with its attributes (read with inspect.getattr_static: no property runs). The same bytes
from the same packages: names sorted, addresses masked, a fixed hash seed (the build sets it).
"""

import importlib
import inspect
import json
import pkgutil
import re
import sys
import warnings
from typing import Any

Row = list[Any]

MODULES = (
    "builtins", "math", "cmath", "random", "statistics", "os", "os.path", "sys", "json", "re", "collections",
    "itertools", "functools", "operator", "datetime", "time", "calendar", "pathlib", "glob", "shutil", "csv",
    "io", "string", "textwrap", "typing", "dataclasses", "enum", "decimal", "fractions", "copy", "pickle",
    "heapq", "bisect", "array", "struct", "hashlib", "base64", "zlib", "gzip", "zipfile", "urllib.parse",
    "numpy", "numpy.random", "numpy.linalg", "numpy.fft", "numpy.ma",
    "pandas", "pandas.api.types",
    "matplotlib", "matplotlib.pyplot", "matplotlib.colors", "matplotlib.cm", "matplotlib.ticker",
    "matplotlib.patches", "matplotlib.dates",
    "scipy", "scipy.stats", "scipy.optimize", "scipy.integrate", "scipy.interpolate", "scipy.linalg",
    "scipy.signal", "scipy.sparse", "scipy.spatial", "scipy.special", "scipy.cluster", "scipy.ndimage",
    "sklearn", "sklearn.linear_model", "sklearn.model_selection", "sklearn.metrics", "sklearn.preprocessing",
    "sklearn.cluster", "sklearn.decomposition", "sklearn.ensemble", "sklearn.tree", "sklearn.neighbors",
    "sklearn.svm", "sklearn.pipeline", "sklearn.datasets", "sklearn.naive_bayes", "sklearn.impute",
    "IPython", "IPython.display", "seaborn", "statsmodels.api", "statsmodels.formula.api",
)  # fmt: skip
# Only Debian's packages are imported here (the build runs this as root in the tree): an
# environment's wheels (runner.images.wheels) are unpacked, never run, at build, so theirs are not indexed.
MEMBERS_MAX, ATTRIBUTES_MAX, CLASSES_MAX, TEXT_MAX = 2000, 600, 3000, 300
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def main(out: str) -> int:
    warnings.simplefilter("ignore")
    modules: dict[str, list[Row]] = {}
    classes: dict[str, list[Row]] = {}
    pending: dict[str, type] = {}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # an image without it: said, and left out
            print(f"cordon_index: {name} not indexed ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        modules[name] = [_member(module, member, pending) for member in _public(module)][:MEMBERS_MAX]
    for key in sorted(pending)[:CLASSES_MAX]:
        classes[key] = _attributes(pending[key])
    # sys.path[0] is this program's folder (Cordon's own cell modules): not a cell's to import.
    importable = sorted({m.name for m in pkgutil.iter_modules(sys.path[1:]) if not m.name.startswith("_")}
                        | {n for n in sys.builtin_module_names if not n.startswith("_")})  # fmt: skip
    data = {"modules": modules, "classes": classes, "importable": importable}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    print(f"cordon_index: {len(modules)} modules, {len(classes)} classes", file=sys.stderr)
    return 0


def _public(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(set(n for n in names if hasattr(module, n)))


def _member(module: Any, name: str, pending: dict[str, type]) -> Row:
    value = getattr(module, name)
    if inspect.ismodule(value):
        return [name, "module", "", _doc(value), value.__name__]
    if isinstance(value, type):
        key = f"{value.__module__}.{value.__qualname__}"
        pending.setdefault(key, value)
        return [name, "class", *_signature_doc(name, value), key]
    if callable(value):
        return [name, "function", *_signature_doc(name, value)]
    return [name, "variable", "", ""]


def _attributes(kind: type) -> list[Row]:
    out: list[Row] = []
    for name in sorted(dir(kind)):
        if name.startswith("__") or not isinstance(name, str):
            continue
        try:
            found = inspect.getattr_static(kind, name)
        except Exception:  # noqa: S112 - a class whose __dir__ names what it does not have
            continue
        if isinstance(found, property):
            out.append([name, "property", "", _doc(found)])
        elif isinstance(found, (staticmethod, classmethod)):
            out.append([name, "method", *_signature_doc(name, getattr(kind, name, found))])
        elif isinstance(found, type):
            out.append([name, "class", *_signature_doc(name, found)])
        elif callable(found):
            out.append([name, "method", *_signature_doc(name, found, bound=True)])
        else:
            out.append([name, "attribute", "", ""])
        if len(out) >= ATTRIBUTES_MAX:
            break
    return out


def _signature_doc(name: str, value: Any, bound: bool = False) -> tuple[str, str]:
    """(signature, doc line): inspect's signature, else the one the docstring opens with, in which
    case the doc line is the next one."""
    doc = inspect.getdoc(value) if _has_doc(value) else None
    lines = [line.strip() for line in (doc or "").splitlines()]
    try:
        found = inspect.signature(value)
        parameters = list(found.parameters.values())
        if bound and parameters and parameters[0].name == "self":
            found = found.replace(parameters=parameters[1:])
        signature = str(found)
    except (TypeError, ValueError):
        signature = ""
        opening = re.match(rf"^(?:\w+\.)?{re.escape(name)}\(", lines[0]) if lines else None
        if opening:  # numpy's `array(object, ...)`, and `a.sum(axis=None, ...)` for a method
            signature, lines = _opening_signature(name, [lines[0][opening.end() - len(name) - 1 :], *lines[1:]])
    first = next((line for line in lines if line), "")
    return ADDRESS.sub("", signature)[:TEXT_MAX], first[:TEXT_MAX]


def _opening_signature(name: str, lines: list[str]) -> tuple[str, list[str]]:
    """The signature a docstring opens with, over as many lines as its parentheses take (at most
    five), and the lines after it."""
    text, depth = "", 0
    for at, line in enumerate(lines[:5]):
        text += (" " if text and not text.endswith("(") else "") + line
        depth = text.count("(") - text.count(")")
        if depth <= 0:
            return text[len(name) :], lines[at + 1 :]
    return "", lines


def _has_doc(value: Any) -> bool:
    try:
        return isinstance(value.__doc__, str)
    except Exception:
        return False


def _doc(value: Any) -> str:
    text = value.__doc__ if _has_doc(value) else ""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:TEXT_MAX]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
