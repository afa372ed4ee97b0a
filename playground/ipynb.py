"""Notebooks in and out of Jupyter's format (nbformat 4; 3 is upgraded on import), and a .py or .js
script opened as a notebook of one code cell. Only code and markdown cells cross; on export each
code cell carries its last run's outputs (streams, displays, figures, its error) and the notebook
its own inputs in its metadata; on import the outputs a page can show are kept (imported_outputs). Reading, validating
and writing a notebook (seconds of CPU and hundreds of MiB for a hostile 4 MiB file) happen in a
bounded child (runner.bounded, BOUNDS), never in the web process."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Literal, NotRequired, TypedDict

import nbformat
from nbformat import v4

from playground.displays import sanitise_html
from playground.errors import ServiceError
from playground.markdown import render_markdown
from runner import bounded
from runner.spec import RUNTIMES
from runner.units import size_words

MAX_CELLS = 200
MAX_CELLS_READ = 1000  # cells of any kind (raw ones are dropped) before the notebook is validated
BOUNDS = bounded.Bounds(cpu_s=5, wall_s=15.0, memory_mib=1024, input_max_bytes=64 << 20, output_max_bytes=96 << 20)
MAX_CODE_BYTES = 256 * 1024  # a cell's source; the same as services/runs.py's cap on a run's code
# What an import keeps of a cell's outputs: a page shows them until the cell runs.
IMPORT_MAX_OUTPUTS = 32
IMPORT_TEXT_MAX_CHARS = 64 * 1024
IMPORT_IMAGE_MAX_BYTES = 2 << 20
IMPORT_IMAGES_MAX_BYTES = 8 << 20  # all of a notebook's images together
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the colours IPython's tracebacks carry
CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat's pattern, and a Cordon cell's too
# A JavaScript cell in a Python notebook: Jupyter runs it with node through IPython's %%script.
NODE_SCRIPT = re.compile(r"%%script[ \t]+node[ \t]*(?:\n|$)")
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
    outputs: NotRequired[list[dict[str, Any]]]  # an imported code cell's outputs a page can show


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
    notebook, outputs = _read_notebook(text)
    runtime = _notebook_runtime(notebook.metadata)
    kept = [cell for cell in notebook.cells if cell.cell_type in ("code", "markdown")]
    kept_outputs = [shown for cell, shown in zip(notebook.cells, outputs, strict=False)
                    if cell.cell_type in ("code", "markdown")]  # fmt: skip
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
        source = cell.source
        if cell.cell_type == "code" and (script := NODE_SCRIPT.match(source)) is not None and own in (None, "node"):
            own, source = "node", source[script.end() :]  # a JavaScript cell as Jupyter runs it: %%script node
        cells.append({"kind": cell.cell_type, "runtime": own if own in RUNTIMES else runtime, "source": source})
        if cell.cell_type == "code" and index < len(kept_outputs) and kept_outputs[index]:
            cells[-1]["outputs"] = kept_outputs[index]
    return runtime, cells


def ipynb_from_cells(
    name: str,
    cells: Sequence[Mapping[str, Any]],
    outputs_for: Callable[[str], tuple[int | None, list[dict[str, Any]]]],
    inputs: Sequence[Mapping[str, Any]] = (),
    runtime: str | None = None,
) -> str:
    """The notebook as nbformat 4 JSON, written in a bounded child. Each cell mapping has kind,
    runtime, source and last_run_id (and may have an id); outputs_for(last_run_id) is that run's
    execution count and outputs as nbformat 4 output dicts (streams, displays, its result, figures,
    its error). The notebook's own inputs go in its metadata; its kernel is `runtime`'s (else the
    first code cell's)."""
    shape = ("id", "kind", "runtime", "source")
    plain = []
    for cell in cells:
        count, outputs = _outputs(cell, outputs_for)
        plain.append({**{k: cell[k] for k in shape if k in cell}, "outputs": outputs, "execution_count": count})
    payload = {"name": name, "cells": plain, "inputs": [{"name": i["name"], "id": str(i["id"])} for i in inputs],
               "runtime": runtime}  # fmt: skip
    try:
        return str(bounded.call("playground.ipynb:export_job", payload, BOUNDS))
    except bounded.HostWorkError as exc:
        raise ServiceError(
            "export_failed", f"the notebook could not be written within this service's bounds ({exc.message})",
            status=422,
        ) from None  # fmt: skip


def _outputs(
    cell: Mapping[str, Any], outputs_for: Callable[[str], tuple[int | None, list[dict[str, Any]]]]
) -> tuple[int | None, list[dict[str, Any]]]:
    run_id = cell.get("last_run_id")
    return outputs_for(str(run_id)) if run_id and cell["kind"] == "code" else (None, [])


def export_job(
    *, name: str, cells: list[dict[str, Any]], inputs: list[dict[str, Any]] | None = None, runtime: str | None = None
) -> str:
    """runner.bounded's job: the document ipynb_from_cells answers (each cell with its outputs)."""
    runtime = runtime or next((cell["runtime"] for cell in cells if cell["kind"] == "code"), "python")
    metadata: dict[str, Any] = {"title": name, **KERNELS.get(runtime, KERNELS["python"])}
    if inputs:
        metadata["cordon"] = {"inputs": inputs}
    notebook = v4.new_notebook(metadata=metadata)
    for cell in cells:
        # Each cell's own runtime, so a notebook mixing Python and JavaScript cells comes back whole;
        # in a Python notebook a JavaScript cell is also a %%script node cell, which Jupyter runs.
        options: dict[str, Any] = {"metadata": {"cordon": {"runtime": cell["runtime"]}}}
        if _is_cell_id(cell.get("id")):
            options["id"] = cell["id"]
        if cell["kind"] == "markdown":
            notebook.cells.append(v4.new_markdown_cell(cell["source"], **options))
            continue
        outputs = [nbformat.from_dict(output) for output in cell.get("outputs") or []]
        count = cell.get("execution_count")
        count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
        source = cell["source"]
        if runtime == "python" and cell["runtime"] == "node":
            source = "%%script node\n" + source  # so Jupyter runs it with node, not as Python
        notebook.cells.append(v4.new_code_cell(source, outputs=outputs, execution_count=count, **options))
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


def _read_notebook(text: str) -> tuple[Any, list[list[dict[str, Any]]]]:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise _invalid("the file is not a notebook: it is not UTF-8 JSON") from None
    version = document.get("nbformat") if isinstance(document, dict) else None
    if type(version) is not int or version not in (3, 4):
        raise _invalid("the file is not a Jupyter notebook of format 3 or 4 (no nbformat 3 or 4 in it)")
    outputs = _drop_outputs(document, version)
    # Validated in its own version before the upgrade, so the converter only sees a well-formed notebook;
    # nbformat.reads would only log what is wrong, not refuse it.
    try:
        nbformat.validate(document)
        notebook = nbformat.versions[version].to_notebook_json(document)
        notebook = nbformat.convert(notebook, 4)
        nbformat.validate(notebook)
    except _READ_ERRORS as error:
        raise _invalid(f"the notebook is not valid: {_first_line(error)}") from None
    return notebook, outputs


def _drop_outputs(document: dict[str, Any], version: int) -> list[list[dict[str, Any]]]:
    """Before validation: count the cells (too many is refused before any schema work) and take
    their outputs out, so none of them is validated; returns, for each cell (of format 4; an
    older notebook's outputs are dropped), what of its outputs a page can show (_shown_outputs)."""
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
    shown: list[list[dict[str, Any]]] = []
    budget = [IMPORT_IMAGES_MAX_BYTES]
    for cell in cells:
        kept: list[dict[str, Any]] = []
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            if version == 4:
                kept = _shown_outputs(_list(cell.get("outputs")), budget)
                cell["execution_count"] = None
            cell["outputs"] = []
        shown.append(kept)
    return shown


def _shown_outputs(outputs: list[Any], budget: list[int]) -> list[dict[str, Any]]:
    """An imported cell's outputs as Cordon shows a run's displays ({"mime", "text" | "html" |
    "data", "plain"}, a stream's with its "stream"), each checked, capped and made safe here: in
    the bounded child, like the rest of the import. Images come as base64 "data" within `budget`
    (the caller stores them); anything else (widgets, javascript) is left out."""
    shown: list[dict[str, Any]] = []
    for output in outputs[:IMPORT_MAX_OUTPUTS]:
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream" and output.get("name") in ("stdout", "stderr"):
            text = _joined(output.get("text"))[:IMPORT_TEXT_MAX_CHARS]
            shown.append({"mime": "text/plain", "text": text, "plain": "", "stream": output["name"]})
        elif kind == "error":
            lines = [_ANSI.sub("", _joined(line)) for line in _list(output.get("traceback"))[:200]]
            error = {"ename": _joined(output.get("ename"))[:200], "evalue": _joined(output.get("evalue"))[:4000]}
            shown.append({"mime": "text/plain", "text": "\n".join(lines)[:IMPORT_TEXT_MAX_CHARS], "plain": "",
                          "error": error})  # fmt: skip
        elif kind in ("display_data", "execute_result") and isinstance(output.get("data"), dict):
            item = _shown_bundle(output["data"], budget)
            if item is not None:
                shown.append(item)
    return shown


def _shown_bundle(data: dict[str, Any], budget: list[int]) -> dict[str, Any] | None:
    plain = _joined(data.get("text/plain"))[:IMPORT_TEXT_MAX_CHARS]
    for mime in ("image/png", "image/jpeg"):
        encoded = _joined(data.get(mime)).replace("\n", "")
        if encoded and len(encoded) * 3 // 4 <= min(budget[0], IMPORT_IMAGE_MAX_BYTES):
            try:
                size = len(base64.b64decode(encoded, validate=True))
            except ValueError:
                continue
            budget[0] -= size
            return {"mime": mime, "data": encoded, "plain": plain}
    if isinstance(data.get("text/html"), str | list):
        return {"mime": "text/html", "text": sanitise_html(_joined(data["text/html"])[:IMPORT_TEXT_MAX_CHARS]),
                "plain": plain}  # fmt: skip
    if isinstance(data.get("text/markdown"), str | list):
        source = _joined(data["text/markdown"])[:IMPORT_TEXT_MAX_CHARS]
        return {"mime": "text/markdown", "text": source, "html": render_markdown(source), "plain": plain}
    return {"mime": "text/plain", "text": plain, "plain": plain} if plain else None


def _joined(value: Any) -> str:
    """A notebook text: one string, or a list of them (nbformat's multiline string)."""
    if isinstance(value, list):
        return "".join(part for part in value if isinstance(part, str))
    return value if isinstance(value, str) else ""


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
