"""A notebook cell's run, around the run itself: the record made when it is created (the state it
starts from), and at its finish what its cell program left: the state kept in storage for the next
cell (never read here), the manifest and displays made safe (playground.displays), the images it
displayed stored like outputs. Purged with the run's outputs."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.files.storage import default_storage
from django.db.models import QuerySet

from playground.displays import IMAGES, clean_bounded, clean_budget_s
from playground.models import Notebook, Run, RunCell
from playground.storage import StorageIntegrityError, save_verified
from runner.spec import MANIFEST_FILE, SESSION_DIR, STATE_FILE, Limits, Outcome, OutputFile, RunResult


def cell_record_create(*, run: Run, notebook: Notebook, cell_id: str, state_from: Run | None) -> RunCell:
    return RunCell.objects.create(run=run, notebook=notebook, cell_id=cell_id[:64], state_from=state_from)


@dataclass
class CellFinish:
    """What a cell's run left, read and cleaned before the run's final record is written."""

    displays: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    files: dict[str, OutputFile] = field(default_factory=dict)  # the session files exported, by name
    clean_s: float | None = None  # the host's CPU that making the manifest safe took (the run's record says it)


def cell_finish_read(*, result: RunResult, exported: Path | None, limits: Limits | None = None) -> CellFinish:
    """The cell's manifest, cleaned (in a bounded child when it is not small) within the cell's own
    budget (the CPU its limits left it, displays.clean_budget_s); done before the final record's
    transaction, which must stay short."""
    finish = CellFinish(files={f.name: f for f in result.session})
    manifest = finish.files.get(MANIFEST_FILE)
    path = exported / SESSION_DIR / MANIFEST_FILE if exported is not None and manifest is not None else None
    if path is not None and path.is_file():
        budget = clean_budget_s((limits or Limits()).cpu_time_s, result.cpu_s)
        cleaned = clean_bounded(path.read_bytes(), budget_s=budget)  # within runner.cells.MANIFEST_MAX_BYTES
        finish.displays, finish.manifest = cleaned["displays"], cleaned["manifest"]
        finish.clean_s = cleaned.get("clean_s")
    return finish


def cell_finish_store(*, run: Run, finish: CellFinish, result: RunResult, exported: Path | None) -> None:
    """Within the final record's transaction: the state (passed down by a cell that succeeded or
    failed on its own error, as a kernel keeps what a failed cell bound), the images its displays
    showed, and the cleaned displays and manifest."""
    record = RunCell.objects.filter(run=run).first()
    if record is None:
        return
    state = finish.files.get(STATE_FILE)
    if state is not None and state_complete(result, finish.manifest, state):
        stored = _store(run, exported, state, "states")
        if stored:
            record.state_file.name, record.state_bytes, record.state_sha256 = stored, state.size, state.sha256
    record.displays = [_display_stored(run, exported, finish.files, display) for display in finish.displays]
    record.manifest = finish.manifest
    record.save()


def state_complete(result: RunResult, manifest: dict[str, Any], state: OutputFile) -> bool:
    """Whether a cell's state file is whole: its program ended by itself (it succeeded, or failed
    and said so), and wrote the manifest, last, naming a state of the size exported. A program
    killed by a limit, or one that died while writing, leaves none to pass down."""
    if result.outcome not in (Outcome.SUCCEEDED, Outcome.FAILED) or result.signal is not None:
        return False
    written = manifest.get("state")
    return isinstance(written, dict) and not written.get("over_cap") and written.get("bytes") == state.size


def _display_stored(
    run: Run, exported: Path | None, files: dict[str, OutputFile], display: dict[str, Any]
) -> dict[str, Any]:
    if display["mime"] not in IMAGES:
        return display
    kept = files.get(display.pop("file", ""))
    stored = _store(run, exported, kept, "displays") if kept is not None else None
    if kept is None or stored is None:  # over the session files' caps, or not written: its text stays
        return {"mime": "text/plain", "text": display.get("plain") or "(an image that was not kept)", "plain": ""}
    return {**display, "path": stored, "size": kept.size, "sha256": kept.sha256}


def _store(run: Run, exported: Path | None, file: OutputFile, folder: str) -> str | None:
    source = exported / SESSION_DIR / file.name if exported is not None else None
    if source is None or not source.is_file():
        return None
    try:
        return save_verified(default_storage, f"{folder}/{secrets.token_hex(16)}", source, file.sha256)
    except StorageIntegrityError:
        return None


def cell_files_purge(records: QuerySet[RunCell], *, states: bool = True, displays: bool = True) -> int:
    """Delete the stored states (`states`) and displayed images (`displays`) of these cells' runs;
    returns how many files. The displays keep their text, an image its note."""
    count = 0
    if not displays:
        records = records.exclude(state_file="")
    elif not states:
        records = records.exclude(displays=[])
    for record in records.exclude(state_file="", displays=[]):
        if states and record.state_file:
            record.state_file.delete(save=False)
            RunCell.objects.filter(run_id=record.run_id).update(state_file="")
            count += 1
        if not displays:
            continue
        kept = []
        for display in record.displays:
            if "path" in display:
                default_storage.delete(display["path"])
                count += 1
                display = {
                    "mime": "text/plain",
                    "text": display.get("plain") or "(an image, since deleted)",
                    "plain": "",
                }
            kept.append(display)
        RunCell.objects.filter(run_id=record.run_id).update(displays=kept)
    return count
