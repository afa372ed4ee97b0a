"""Which state each code cell of a notebook starts from, and which cells are stale.

A cell starts from the state left by the last finished run of the nearest code cell above it that
has one (top to bottom, like a script: not click order). A run that succeeded passes its state down,
and so does one that failed on its own error, as a kernel keeps what a failed cell bound before the
error (services.cells.state_complete says which states are whole); a cell that was stopped by a
limit, never run or ran before the notebook's restart passes nothing down, so the cell below
starts from the one before it. A change of runtime starts from nothing. A cell is stale when its
code changed since its run, when what it would start from now is not what its run started from (a
cell above ran again, or was restarted), or when the cell it starts from is itself stale.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from typing import Any

from django.core.files.storage import default_storage
from django.http import Http404

from playground.displays import TABLE
from playground.models import Notebook, Run, RunCell, RunState
from playground.previews import image_content_type
from playground.selectors.runs import run_log_read
from runner.spec import Outcome


@dataclass(frozen=True)
class Source:
    """The run a cell's state comes from, and the cell that ran it."""

    run: Run
    cell_id: str
    number: int  # the cell's place in the notebook, from 1

    def to_json(self) -> dict[str, Any]:
        return {"cell_id": self.cell_id, "cell_number": self.number, "run_id": str(self.run.id),
                "finished_at": self.run.finished_at}  # fmt: skip


@dataclass(frozen=True)
class CellChain:
    run: Run | None  # the cell's last run (the latest retry of it, if it was retried)
    starts_from: Source | None  # what it would start from if run now
    stale: str  # why it is stale ("" when it is not)
    fresh_start: str  # why it starts from nothing, when it does and a cell above has state


def notebook_chain(*, notebook: Notebook) -> tuple[dict[str, CellChain], Source | None]:
    """Each code cell's chain facts by cell id, and the state a new cell at the end would start
    from (the notebook's variables). Two queries, whatever the number of cells."""
    runs = _last_runs([c.get("last_run_id") for c in notebook.cells if c["kind"] == "code"])
    chain: dict[str, CellChain] = {}
    source: Source | None = None
    source_stale = False
    runtime: str | None = None
    for index, cell in enumerate(notebook.cells):
        if cell["kind"] != "code":
            continue
        fresh_start = ""
        if runtime is not None and cell["runtime"] != runtime and source is not None:
            fresh_start = f"cell {source.number} is {runtime}; this cell's runtime starts from nothing"
            source, source_stale = None, False
        runtime = cell["runtime"]
        run = runs.get(str(cell.get("last_run_id")))
        stale = _stale(notebook, cell, run, source, source_stale)
        chain[cell["id"]] = CellChain(run=run, starts_from=source, stale=stale, fresh_start=fresh_start)
        if run is not None and passes_state(run, notebook):
            source, source_stale = Source(run=run, cell_id=cell["id"], number=index + 1), bool(stale)
    return chain, source


def passes_state(run: Run, notebook: Notebook) -> bool:
    """Whether a cell's run leaves a state the cell below may start from."""
    cell: RunCell | None = getattr(run, "cell", None)
    return (
        run.state == RunState.FINISHED
        and run.outcome in (Outcome.SUCCEEDED, Outcome.FAILED)
        and cell is not None
        and bool(cell.state_file)
        and (notebook.restarted_at is None or run.created_at >= notebook.restarted_at)
    )


def _stale(notebook: Notebook, cell: dict[str, Any], run: Run | None, source: Source | None, above: bool) -> str:
    if run is None or run.state != RunState.FINISHED:
        return ""  # never run, or running now: nothing to compare yet
    record: RunCell | None = getattr(run, "cell", None)
    started_from = record.state_from_id if record is not None else None
    if run.code != cell["source"]:
        return "its code changed since it ran"
    if notebook.restarted_at is not None and run.created_at < notebook.restarted_at:
        return "the notebook was restarted since it ran"
    if started_from != (source.run.id if source else None):
        if source is None:
            return "the state it started from is gone (a cell above changed, failed or was cleared)"
        return f"cell {source.number} ran since; run this cell again to use its state"
    if above:
        return f"cell {source.number if source else '?'}, whose state it started from, is stale"
    return ""


def _last_runs(ids: list[Any]) -> dict[str, Run]:
    """The runs by the id a cell recorded; a run that was retried is represented by its latest retry."""
    wanted = [str(i) for i in ids if i]
    if not wanted:
        return {}
    runs = {str(r.id): r for r in Run.objects.filter(id__in=wanted).select_related("cell")}
    retries = Run.objects.filter(retry_of__in=wanted).select_related("cell").order_by("created_at")
    for retry in retries:
        runs[str(retry.retry_of_id)] = retry
    return runs


def run_cell(*, run: Run) -> RunCell | None:
    """A run's notebook cell record, if it is a cell's run (the caller may read the run)."""
    return run.cell_record


def displayed_image(*, run: Run, index: int) -> dict[str, Any]:
    """The `index`th display of a cell's run, if it is a stored image; 404 otherwise."""
    record = run_cell(run=run)
    displays = record.displays if record is not None else []
    display = displays[index] if 0 <= index < len(displays) else {}
    if "path" not in display:
        raise Http404("no such image")
    return display


PYTHON_TRACEBACK = b"Traceback (most recent call last):"


@dataclass
class ExportBudget:
    """What a notebook's export may carry, all cells together, so its size is bounded."""

    text_bytes: int = 8 << 20
    image_bytes: int = 24 << 20

    def text(self, text: str) -> str:
        data = text.encode()[: max(0, self.text_bytes)]
        self.text_bytes -= len(data)
        return data.decode(errors="ignore")


def run_outputs_for_export(*, user: Any, run_id: Any, budget: ExportBudget) -> tuple[int | None, list[dict[str, Any]]]:
    """A cell's last run as Jupyter outputs (nbformat 4 output dicts) in the order Jupyter shows
    them: stdout and stderr as they came between its displays (each display says where in the
    streams it came), its result as an execute_result, the figures and images it wrote, then its
    error (whose traceback was also written to stderr: cut there, as Jupyter writes it once); within
    `budget`. With the cell's execution count. The user's own runs only; nothing for another's or
    a missing run."""
    run = Run.objects.own(user).filter(id=run_id).first()
    if run is None:
        return None, []
    record = run_cell(run=run)
    manifest = record.manifest if record is not None else {}
    error = manifest.get("error") or None
    if error and not error.get("traceback"):
        error = None  # a UsageError: IPython writes it to stderr only, as Jupyter shows it
    streams = {stream: _stream_text(run, stream, budget) for stream in ("stdout", "stderr")}
    if error and isinstance(error.get("at"), dict):
        streams["stderr"] = streams["stderr"][: error["at"]["stderr"]]
    elif error and (end := streams["stderr"].rfind(PYTHON_TRACEBACK)) >= 0:
        streams["stderr"] = streams["stderr"][:end]  # a run of the cell program before IPython
    cleared = manifest.get("cleared") or {"stdout": 0, "stderr": 0}
    done: dict[str, int] = dict(cleared)
    outputs: list[dict[str, Any]] = []
    for display in record.displays if record is not None else []:
        at: dict[str, int] = display.get("at") or {}
        for stream in ("stdout", "stderr"):
            outputs += _stream_output(stream, streams[stream], done, at.get(stream, done[stream]))
        bundle = _bundle(display, budget)
        if not bundle:
            continue
        if "result" in display:
            outputs.append({"output_type": "execute_result", "execution_count": display["result"], "data": bundle,
                            "metadata": {}})  # fmt: skip
        else:
            outputs.append({"output_type": "display_data", "data": bundle, "metadata": {}})
    for stream in ("stdout", "stderr"):
        outputs += _stream_output(stream, streams[stream], done, len(streams[stream]))
    outputs += _written_images(run, budget)
    if error:
        outputs.append({"output_type": "error", "ename": error["ename"], "evalue": error["evalue"],
                        "traceback": [budget.text(line) for line in error["traceback"]]})  # fmt: skip
    return manifest.get("execution_count"), outputs


def _stream_text(run: Run, stream: str, budget: ExportBudget) -> bytes:
    data, _, _ = run_log_read(run=run, stream=stream, offset=0, limit=min(1 << 20, max(0, budget.text_bytes)))
    budget.text_bytes -= len(data)
    return data


def _stream_output(stream: str, data: bytes, done: dict[str, int], until: int) -> list[dict[str, Any]]:
    """The stream's text from where the last output of it ended to `until` (a byte offset)."""
    start, end = done[stream], max(done[stream], min(until, len(data)))
    done[stream] = end
    text = data[start:end].decode(errors="replace")
    return [{"output_type": "stream", "name": stream, "text": text}] if text else []


def _written_images(run: Run, budget: ExportBudget) -> list[dict[str, Any]]:
    """Images the run wrote to its outputs (a figure saved by the program), as displays."""
    outputs = []
    for output in run.outputs.exclude(file="").order_by("name"):
        content_type = image_content_type(output.name)
        if content_type in ("image/png", "image/jpeg") and output.size <= budget.image_bytes:
            budget.image_bytes -= output.size
            with output.file.open("rb") as handle:
                image = base64.b64encode(handle.read()).decode()
            outputs.append({"output_type": "display_data", "metadata": {},
                            "data": {content_type: image, "text/plain": f"<{output.name}>"}})  # fmt: skip
    return outputs


def _bundle(display: dict[str, Any], budget: ExportBudget) -> dict[str, Any]:
    mime, plain = display["mime"], budget.text(display.get("plain") or "")
    bundle: dict[str, Any] = {"text/plain": plain} if plain else {}
    if "path" in display:
        if display["mime"] == "image/svg+xml" or display["size"] > budget.image_bytes:
            return bundle
        budget.image_bytes -= display["size"]
        with default_storage.open(display["path"], "rb") as handle:
            bundle[mime] = base64.b64encode(handle.read()).decode()
    elif mime == TABLE:
        bundle["text/html"] = budget.text(_table_html(display["table"]))
    elif mime == "text/markdown":
        bundle[mime] = budget.text(display["text"])
    elif mime == "application/json":
        try:
            bundle[mime] = json.loads(display["text"])
        except ValueError:  # cut at its cap: its text stays
            bundle.setdefault("text/plain", budget.text(display["text"]))
    elif "text" in display:
        bundle[mime] = budget.text(display["text"])
    return bundle


def _table_html(table: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(str(c['name']))}</th>" for c in table["columns"])
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
        for row in table["rows"]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
