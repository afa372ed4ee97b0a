"""Notebooks in and out of Jupyter's format (nbformat 4; 3 is upgraded on import), and a .py or .js
script opened as a notebook of one code cell. Only code and markdown cells cross; outputs are
dropped on import, and on export each code cell carries its last run's stdout. Reading, validating
and writing a notebook (seconds of CPU and hundreds of MiB for a hostile 4 MiB file) happen in a
bounded child (runner.bounded, BOUNDS), never in the web process."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Literal, TypedDict

import nbformat
from nbformat import v4

from playground.services.errors import ServiceError
from runner import bounded
from runner.spec import RUNTIMES
from runner.units import size_words

MAX_CELLS = 200
MAX_CELLS_READ = 1000  # cells of any kind (raw ones are dropped) before the notebook is validated
BOUNDS = bounded.Bounds(cpu_s=5, wall_s=15.0, memory_mib=1024, input_max_bytes=64 << 20, output_max_bytes=96 << 20)
MAX_CODE_BYTES = 256 * 1024  # a cell's source; the same as services/runs.py's cap on a run's code
CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat's pattern, and a Cordon cell's too
SCRIPT_RUNTIMES = {".py": "python", ".js": "node"}
# The language a kernel declares, lower-cased, to the runtime that runs it; any other is python's.
LANGUAGE_RUNTIMES = {"python": "python", "javascript": "node", "typescript": "node", "node": "node", "nodejs": "node"}
KERNELS = {
    "python": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python", "file_extension": ".py", "mimetype": "text/x-python"},
    },
    "node": {  # as IJavascript, the usual Node.js kernel, declares itself
        "kernelspec": {"name": "javascript", "display_name": "JavaScript (Node.js)", "language": "javascript"},
        "language_info": {"name": "javascript", "file_extension": ".js", "mimetype": "application/javascript"},
    },
}
# Whatever hostile JSON makes nbformat's readers and converters trip on, besides its ValidationError.
_READ_ERRORS = (nbformat.ValidationError, ValueError, TypeError, KeyError, AttributeError, RecursionError)


class NotebookCell(TypedDict):
    kind: Literal["code", "markdown"]
    runtime: str
    source: str


def cells_from_ipynb(data: bytes) -> tuple[str, list[NotebookCell]]:
    """The notebook's runtime (from its kernel's language; python when it names none Cordon runs)
    and its code and markdown cells, each with its runtime (as exported by Cordon, else the
    notebook's); read in a bounded child."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _invalid("the file is not a notebook: it is not UTF-8 JSON") from None
    try:
        answer = bounded.call("playground.ipynb:import_job", {"text": text}, BOUNDS)
    except bounded.HostWorkError as exc:
        raise _invalid(f"the notebook could not be read within this service's bounds ({exc.message})") from None
    if "error" in answer:
        raise ServiceError(**answer["error"], field="file")
    return answer["runtime"], answer["cells"]


def import_job(*, text: str) -> dict[str, Any]:
    """runner.bounded's job: what cells_from_ipynb answers, or the refusal."""
    try:
        runtime, cells = _cells(text)
    except ServiceError as exc:
        return {"error": {"code": exc.code, "message": exc.message, "status": exc.status}}
    return {"runtime": runtime, "cells": cells}


def _cells(text: str) -> tuple[str, list[NotebookCell]]:
    notebook = _read_notebook(text)
    runtime = _notebook_runtime(notebook.metadata)
    kept = [cell for cell in notebook.cells if cell.cell_type in ("code", "markdown")]
    if len(kept) > MAX_CELLS:
        raise ServiceError(
            "too_many_cells", f"the notebook has {len(kept)} cells; at most {MAX_CELLS}", field="file", status=422
        )
    cells: list[NotebookCell] = []
    for index, cell in enumerate(kept):
        if len(cell.source.encode()) > MAX_CODE_BYTES:
            raise ServiceError(
                "code_too_large", f"cell {index + 1} is over {size_words(MAX_CODE_BYTES)}", field="file", status=422
            )
        cordon = cell.metadata.get("cordon")
        own = cordon.get("runtime") if isinstance(cordon, Mapping) else None
        cells.append({"kind": cell.cell_type, "runtime": own if own in RUNTIMES else runtime, "source": cell.source})
    return runtime, cells


def ipynb_from_cells(name: str, cells: Sequence[Mapping[str, Any]], stdout_for: Callable[[str], str | None]) -> str:
    """The notebook as nbformat 4 JSON, written in a bounded child. Each cell mapping has kind,
    runtime, source and last_run_id (and may have an id); stdout_for(last_run_id) is that run's
    stdout, or None."""
    shape = ("id", "kind", "runtime", "source")
    plain = [{**{k: cell[k] for k in shape if k in cell}, "stdout": _stdout(cell, stdout_for)} for cell in cells]
    try:
        return str(bounded.call("playground.ipynb:export_job", {"name": name, "cells": plain}, BOUNDS))
    except bounded.HostWorkError as exc:
        raise ServiceError(
            "export_failed", f"the notebook could not be written within this service's bounds ({exc.message})",
            status=422,
        ) from None  # fmt: skip


def _stdout(cell: Mapping[str, Any], stdout_for: Callable[[str], str | None]) -> str | None:
    run_id = cell.get("last_run_id")
    return stdout_for(str(run_id)) if run_id and cell["kind"] == "code" else None


def export_job(*, name: str, cells: list[dict[str, Any]]) -> str:
    """runner.bounded's job: the document ipynb_from_cells answers (each cell with its stdout)."""
    runtime = next((cell["runtime"] for cell in cells if cell["kind"] == "code"), "python")
    notebook = v4.new_notebook(metadata={"title": name, **KERNELS.get(runtime, KERNELS["python"])})
    for cell in cells:
        # Each cell's own runtime, so a notebook mixing Python and JavaScript cells comes back whole.
        options: dict[str, Any] = {"metadata": {"cordon": {"runtime": cell["runtime"]}}}
        if _is_cell_id(cell.get("id")):
            options["id"] = cell["id"]
        if cell["kind"] == "markdown":
            notebook.cells.append(v4.new_markdown_cell(cell["source"], **options))
            continue
        stdout = cell.get("stdout")
        outputs = [v4.new_output("stream", name="stdout", text=stdout)] if stdout else []
        notebook.cells.append(v4.new_code_cell(cell["source"], outputs=outputs, **options))
    nbformat.validate(notebook)  # a failure here is Cordon's bug, not the user's: let it raise
    # Texts as one string each (the format allows it): a list of lines costs ~100 bytes a line.
    return str(nbformat.writes(notebook, split_lines=False))


def cells_from_script(name: str, data: bytes) -> tuple[str, list[NotebookCell]]:
    """A .py or .js file as its runtime and one code cell holding it."""
    runtime = SCRIPT_RUNTIMES.get(PurePosixPath(name).suffix.lower())
    if runtime is None:
        raise ServiceError("unsupported_file", f"{name!r} is not a .py or .js script", field="file", status=422)
    if len(data) > MAX_CODE_BYTES:
        raise ServiceError(
            "code_too_large", f"the script is over {size_words(MAX_CODE_BYTES)}", field="file", status=422
        )
    try:
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ServiceError("invalid_script", "the script is not UTF-8 text", field="file", status=422) from None
    return runtime, [{"kind": "code", "runtime": runtime, "source": source}]


def _read_notebook(text: str) -> Any:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise _invalid("the file is not a notebook: it is not UTF-8 JSON") from None
    version = document.get("nbformat") if isinstance(document, dict) else None
    if type(version) is not int or version not in (3, 4):
        raise _invalid("the file is not a Jupyter notebook of format 3 or 4 (no nbformat 3 or 4 in it)")
    _drop_outputs(document, version)
    # Validated in its own version before the upgrade, so the converter only sees a well-formed notebook;
    # nbformat.reads would only log what is wrong, not refuse it.
    try:
        nbformat.validate(document)
        notebook = nbformat.versions[version].to_notebook_json(document)
        notebook = nbformat.convert(notebook, 4)
        nbformat.validate(notebook)
    except _READ_ERRORS as error:
        raise _invalid(f"the notebook is not valid: {_first_line(error)}") from None
    return notebook


def _drop_outputs(document: dict[str, Any], version: int) -> None:
    """Before validation: count the cells (too many is refused before any schema work) and drop
    their outputs, which an import drops anyway, so none of them is validated either."""
    if version == 4:
        cells = _list(document.get("cells"))
    else:
        sheets = [sheet for sheet in _list(document.get("worksheets")) if isinstance(sheet, dict)]
        cells = [cell for sheet in sheets for cell in _list(sheet.get("cells"))]
    if len(cells) > MAX_CELLS_READ:
        raise ServiceError(
            "too_many_cells", f"the notebook has {len(cells)} cells; at most {MAX_CELLS} code and markdown cells",
            field="file", status=422,
        )  # fmt: skip
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"] = []
            if version == 4:
                cell["execution_count"] = None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _notebook_runtime(metadata: Mapping[str, Any]) -> str:
    for section, key in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(section)
        language = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(language, str) and language.lower() in LANGUAGE_RUNTIMES:
            return LANGUAGE_RUNTIMES[language.lower()]
    return "python"


def _is_cell_id(value: object) -> bool:
    return isinstance(value, str) and CELL_ID.fullmatch(value) is not None


def _first_line(error: Exception) -> str:
    # jsonschema's messages run on for pages (the schema, the instance); the first line says what.
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _invalid(message: str) -> ServiceError:
    return ServiceError("invalid_notebook", message, field="file", status=422)
