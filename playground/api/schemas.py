"""The API's shared shapes: the error body and the statuses every operation may answer with, and
what a dataset, a run, a cell and an output look like to a caller (more than one domain answers
with them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.http import HttpRequest
from ninja import Field, Schema
from ninja.files import UploadedFile
from ninja.params.functions import Query

from playground.bodies import (
    JSON_INT_MAX,
    BodyIn,
    Int,
    Text,
)
from playground.downloads import FileStream
from playground.egress import EgressRecordOut, SiteEgressPolicy
from playground.errors import ServiceError
from playground.limits import (
    LimitsIn,
    LimitsOut,
)
from playground.models import Run, RunOutputFile
from playground.previews import output_kind
from playground.selectors import cells as cell_selectors
from playground.uploads import refused_upload_names
from runner.registry import REQUESTABLE
from runner.spec import RUNTIMES

MAX_IDS = 64


class ErrorOut(Schema):
    code: str
    message: str
    field: str | None = None


# What any operation may answer besides its own results: a body it cannot parse or that is too
# large, no (or a refused) login, throttling. Operations add their own 404/409/422.
COMMON_ERRORS = (400, 401, 403, 413, 429)


def answers(ok: dict[int, Any], *errors: int) -> dict[int, Any]:
    return {**ok, **dict.fromkeys(sorted({*COMMON_ERRORS, *errors}), ErrorOut)}


class DatasetOut(Schema):
    id: UUID
    name: str
    size: int
    sha256: str
    sniffed_type: str
    created_at: datetime


class PreviewColumnOut(Schema):
    name: str
    type: Literal["integer", "number", "boolean", "date", "datetime", "string", "empty"]


class PreviewOut(Schema):
    columns: list[PreviewColumnOut]
    rows: list[list[Any]]
    total_rows: int
    total_rows_exact: bool = Field(
        description="false for a large file: its rows past the first MiB are counted by their line breaks"
    )
    total_rows_at_least: bool = Field(
        False,
        description="true for a file over 16 MiB: its lines are counted no further, so total_rows is a lower bound",
    )


class DatasetPreviewOut(PreviewOut):
    text: str = Field(description="the first bytes as text (for any dataset, a table or not)")


PREVIEW_ROWS = Query(50, ge=1, le=500)


OutputId = Annotated[Int, Field(ge=1, le=JSON_INT_MAX)]
# Documented as enums; the services check them and answer unknown_runtime / unknown_engine.
RuntimeName = Annotated[str, Field(json_schema_extra={"enum": list(RUNTIMES)})]
EngineName = Annotated[str, Field(json_schema_extra={"enum": list(REQUESTABLE)})]
# An environment's name (images/<name>; GET /api/environments lists them), or blank for the runtime's own.
EnvironmentName = Annotated[str, Field(max_length=64, pattern=r"^([a-z0-9][a-z0-9._-]*)?$")]


class RunIn(BodyIn):
    runtime: RuntimeName
    code: Text
    environment: EnvironmentName = Field(
        default="",
        description="an environment of this runtime (GET /api/environments); left out: the runtime's own image",
    )
    dataset_ids: list[UUID] = Field(default=[], max_length=MAX_IDS)
    output_ids: list[OutputId] = Field(default=[], max_length=MAX_IDS)
    limits: LimitsIn = Field(default_factory=LimitsIn)  # type: ignore[valid-type]
    engine: EngineName = "auto"
    egress: SiteEgressPolicy = []


class OutputOut(Schema):
    id: int
    name: str
    size: int
    sha256: str
    url: str | None = Field(description="the file, as a download")
    kind: Literal["image", "table", "file"] = Field(description="image: shown inline; table: has a preview")
    inline_url: str | None = Field(description="an image, served to be shown in the page (never as a document)")


class ImageOut(Schema):
    name: str
    digest: str


class CheckOut(Schema):
    name: str
    ok: bool
    detail: str


class EventOut(Schema):
    state: str
    at: datetime
    detail: dict[str, Any]


class DisplayOut(Schema):
    """One thing a notebook cell displayed, as it is shown: `text` (text/plain, application/json,
    text/latex; text/html sanitised on the server), `html` (text/markdown rendered), `table`
    (a data frame: {"columns": [{"name", "type"}], "rows", "total_rows", "total_columns"}) or `url`
    (an image, served like a figure). `plain` is its text/plain form."""

    mime: str
    text: str | None = None
    html: str | None = None
    table: dict[str, Any] | None = None
    url: str | None = None
    plain: str = ""
    result: int | None = Field(None, description="the cell's result (its bare last expression, Jupyter's "
                               "execute_result): its execution count; null for a display")  # fmt: skip


class VariableOut(Schema):
    name: str
    type: str
    module: str | None = None
    shape: list[int] | None = None
    length: int | None = None
    bytes: int | None = Field(None, description="its size in memory, as the cell program measured it")
    table: dict[str, Any] | None = Field(None, description="a data frame's first rows, as a display's table")


class NotCarriedOut(Schema):
    name: str
    type: str
    why: str = Field(description='why it did not carry to the next cell ("open file", "socket", ...)')


class CarriedFileOut(Schema):
    name: str
    bytes: int


class StartsFromOut(Schema):
    cell_id: str
    cell_number: int
    run_id: UUID
    finished_at: datetime | None


class CellRunOut(Schema):
    notebook_id: UUID | None
    cell_id: str
    state_from: UUID | None = Field(description="the run whose state this cell started from (null: from nothing)")
    state_bytes: int | None = Field(description="the state it left for the next cell (null: none kept)")
    variables: list[VariableOut]
    not_carried: list[NotCarriedOut]
    modules: dict[str, str]
    restored: dict[str, Any] | None = Field(description="what of the state it started from was restored")
    error: dict[str, Any] | None = Field(
        description="the error IPython showed: ename, evalue, traceback (IPython's, with its colours), line (the "
        "cell's line that failed)"
    )
    displays_dropped: int
    displays_note: str | None = Field(default=None, description="why displays were not shown, when it was not a cap")
    execution_count: int | None = Field(description="the cell's number in the kernel's count (Jupyter's In [n])")
    files: list[CarriedFileOut] = Field(description="files the cell left in /tmp, carried with its state")


class RunOut(Schema):
    id: UUID
    state: str
    outcome: str | None
    outcome_text: str | None = Field(description="the outcome in plain words, as the pages show it")
    reason: str
    runtime: str
    environment: str = Field(
        description="the environment it asked for (blank: its runtime's own image); `image` is the one it ran in"
    )
    exit_code: int | None
    signal: int | None
    wall_s: float | None
    cpu_s: float | None
    peak_memory_bytes: int | None = Field(description="the program's own memory at its peak (what memory_mib bounds)")
    peak_file_bytes: int | None = Field(description="bytes its scratch and output files held at their peak")
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    engine: str
    engine_version: str
    engine_note: str
    isolation: str
    vm_start: str | None = Field(description='a microVM\'s start: "cold" (booted for this run) or "branch"')
    sandbox_start: str | None = Field(
        description='how the run\'s sandbox came to be: "ready" (made before the run was asked for, handed to it '
        'alone) or "cold" (made for it; engine_note says why not ready); null until it started'
    )
    image: ImageOut | None
    cleanup_ok: bool | None
    charged: bool | None
    error: ErrorOut | None
    retry_of: UUID | None
    retries: list[UUID]
    outputs: list[OutputOut]
    limits: LimitsOut  # type: ignore[valid-type]
    egress: list[str] = Field(description="the run's egress policy: the destinations it may reach (empty: no network)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    displays: list[DisplayOut] = Field(
        [], description="a notebook cell's displays in order (its last expression, display() calls); on GET /runs/{id}"
    )
    cell: CellRunOut | None = Field(None, description="a notebook cell's run: its state; on GET /runs/{id}")


class TimingsOut(Schema):
    """Where a finished run's time went, in seconds on the worker host's clock (null until it
    finished, and where not measured)."""

    start_s: float | None = Field(
        None, description="from the worker's start on the run (admission, image check, staging) to the sandbox's start"
    )
    boot_s: float | None = Field(
        None, description="the microVM's boot, until the program ran; only for an engine with a boot phase (smolvm)"
    )
    total_s: float | None = Field(None, description="the whole supervised run, teardown included")
    branch_s: float | None = Field(
        None, description="a warm start (vm_start branch): the branch of the frozen base, until its agent answered"
    )
    mount_s: float | None = Field(None, description="a warm start: the run's /input, /job and /output added")
    refresh_s: float | None = Field(
        None, description="a warm start: fresh entropy from the host and the host's clock set in the guest"
    )
    cold_s: float | None = Field(None, description="a cold boot of the microVM (after a failed branch too)")
    staging_s: float | None = Field(
        None, description="a ready sandbox (sandbox_start ready): the run's inputs and script put into it"
    )
    handover_s: float | None = Field(
        None, description="a ready sandbox: the run's limits set and its program handed to the waiting interpreter"
    )
    clean_s: float | None = Field(
        None, description="a notebook cell: the host's CPU that making its displays safe to show took (within the "
        "cell's own budget)"
    )  # fmt: skip


class RunDetailOut(RunOut):
    code: str
    timings: TimingsOut
    egress_record: EgressRecordOut | None = Field(
        description="what the run reached through its egress proxy: every attempt and the totals (null for a run "
        "without an egress policy, and until it ends)"
    )
    events: list[EventOut]
    cleanup: list[CheckOut]
    samples: list[Any]


class ReceiptOut(Schema):
    """A run's receipt, as `python -m runner receipt verify FILE --key KEY` reads it."""

    format: Literal["cordon-receipt"]
    receipt: dict[str, Any] = Field(description="the run's facts, the chain and the key id: what is signed")
    sha256: str = Field(description="sha256 of the receipt's canonical JSON (sorted keys, no spaces, UTF-8), hex")
    signature: str = Field(description="Ed25519 signature of that canonical JSON, base64")


class ReceiptKeyOut(Schema):
    algorithm: Literal["Ed25519"]
    key: str = Field(description="the site's public key: ed25519: and the base64 of its 32 bytes")
    key_id: str = Field(description="the id each receipt names its key by")


class LogOut(Schema):
    data: str
    offset: int
    next_offset: int
    complete: bool


def run_out(run: Run, *, detail: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": run.id, "state": run.state, "outcome": run.outcome, "outcome_text": run.outcome_shown or None,
        "reason": run.reason, "runtime": run.runtime, "environment": run.environment,
        "exit_code": run.exit_code, "signal": run.signal, "wall_s": run.wall_s, "cpu_s": run.cpu_s,
        "peak_memory_bytes": run.peak_memory_bytes, "peak_file_bytes": run.peak_file_bytes,
        "stdout_bytes": run.stdout_bytes,
        "stderr_bytes": run.stderr_bytes, "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated, "engine": run.engine, "engine_version": run.engine_version,
        "engine_note": run.engine_note, "isolation": run.isolation, "vm_start": run.vm_start or None,
        "sandbox_start": run.sandbox_start or None,
        "image": {"name": run.image_name, "digest": run.image_digest} if run.image_digest else None,
        "cleanup_ok": run.cleanup_ok, "charged": run.charged,
        "error": {"code": run.error_code, "message": run.error_message, "field": None} if run.error_code else None,
        "retry_of": run.retry_of_id, "retries": [r.id for r in run.retries.all()],
        "outputs": [output_out(o) for o in run.outputs.all()],
        "limits": run.decoded_limits.to_json(), "egress": run.egress, "created_at": run.created_at,
        "started_at": run.started_at, "finished_at": run.finished_at,
    }  # fmt: skip
    if detail:
        out.update(cell_out(run))
        out["code"] = run.code
        out["events"] = [{"state": e.state, "at": e.at, "detail": e.detail} for e in run.events.all()]
        out["cleanup"] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in run.cleanup_checks.all()]
        out["samples"] = run.samples
        out["timings"] = run.timings
        out["egress_record"] = run.egress_record
    return out


def cell_out(run: Run) -> dict[str, Any]:
    record = cell_selectors.run_cell(run=run)
    if record is None:
        return {"displays": [], "cell": None}
    displays = [
        {**{k: v for k, v in d.items() if k not in ("path", "size", "sha256", "at")},
         **({"url": f"/api/runs/{run.id}/displays/{n}"} if "path" in d else {})}
        for n, d in enumerate(record.displays)
    ]  # fmt: skip
    manifest = record.manifest
    cell = {
        "notebook_id": record.notebook_id, "cell_id": record.cell_id, "state_from": record.state_from_id,
        "state_bytes": record.state_bytes if record.state_file else None,
        "variables": manifest.get("variables", []), "not_carried": manifest.get("not_carried", []),
        "modules": manifest.get("modules", {}), "restored": manifest.get("restored"), "error": manifest.get("error"),
        "displays_dropped": manifest.get("displays_dropped", 0),
        "displays_note": manifest.get("displays_note") or manifest.get("problem") or None,
        "execution_count": manifest.get("execution_count"),
        "files": manifest.get("files", []) if record.state_file else [],
    }  # fmt: skip
    return {"displays": displays, "cell": cell}


def output_out(output: RunOutputFile) -> dict[str, Any]:
    stored = bool(output.file)
    kind = output_kind(output.name)
    return {
        "id": output.id, "name": output.name, "size": output.size, "sha256": output.sha256, "kind": kind,
        "url": f"/api/runs/{output.run_id}/outputs/{output.name}" if stored else None,
        "inline_url": f"/api/runs/{output.run_id}/images/{output.name}" if stored and kind == "image" else None,
    }  # fmt: skip


def uploaded_file(request: HttpRequest, file: UploadedFile | None, what: str) -> UploadedFile:
    """The multipart field `file` of an upload (a dataset, a roster), or the refusal of a name that
    is not plain (it is stored as sent, never rewritten) or of a missing file."""
    if refused := refused_upload_names(request):
        raise ServiceError(
            "unsafe_name", f"file name {refused[0]!r} is refused: send a plain name (letters, digits, ._+-), "
            "which is stored as sent, never rewritten", field="file",
        )  # fmt: skip
    if file is None:
        raise ServiceError(
            "file_required", f"send the {what} as a multipart file field named 'file', with a file name",
            field="file", status=422,
        )  # fmt: skip
    return file


# What an image output is served with: shown by an <img> of this site, never run as a document. A
# sandboxed, script-less policy (an SVG opened on its own gets a unique origin and runs nothing),
# readable only by this origin's pages.
IMAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "private, max-age=3600",
}


def inline_image(handle: Any, content_type: str) -> FileStream:
    """An image of this site (an output, a cell's display, an imported output) as IMAGE_HEADERS say."""
    response = FileStream(handle, content_type=content_type)
    response["Content-Disposition"] = "inline"
    for header, value in IMAGE_HEADERS.items():
        response[header] = value
    return response
