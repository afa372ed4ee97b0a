"""The HTTP API (django-ninja) under /api/, docs at /api/docs. Thin: parse, call a service or a
selector, shape the answer. Every error is JSON {"code", "message", "field"} (apierrors.py),
and each operation lists the error statuses it can answer with in the OpenAPI document."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.storage import default_storage
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.http import content_disposition_header
from ninja import Field, File, Schema, Status
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.files import UploadedFile
from ninja.params.functions import Query
from ninja.security import HttpBearer, SessionAuth
from ninja.throttling import AuthRateThrottle

from playground import throttle
from playground.apierrors import error_payload
from playground.bodies import (
    JSON_INT_MAX,
    NOT_BLANK,
    PATTERN_WORDS,
    BodyIn,
    BodyTooLarge,
    Int,
    MalformedJson,
    StrictJsonParser,
    Text,
)
from playground.downloads import FileStream
from playground.egress import EgressPolicy, EgressRecordOut, SiteEgressPolicy, site_ceiling
from playground.egress import describe_validation_error as describe_egress_error
from playground.ipynb import ipynb_from_cells
from playground.limits import (
    CellLimitsIn,
    LimitOut,
    LimitsIn,
    LimitsOut,
    LimitsSet,
    describe_validation_error,
    limits_described,
    limits_from_input,
    limits_from_record,
    limits_set,
)
from playground.models import Dataset, Notebook, Run, RunOutputFile
from playground.openapi import DocumentedApi
from playground.previews import image_content_type, output_kind, table_preview
from playground.selectors import cells as cell_selectors
from playground.selectors import datasets as dataset_selectors
from playground.selectors import notebooks as notebook_selectors
from playground.selectors import runs as run_selectors
from playground.services import accounts as account_services
from playground.services import datasets as dataset_services
from playground.services import notebooks as notebook_services
from playground.services import runs as run_services
from playground.services.audit import record_staff_access
from playground.services.errors import ServiceError
from playground.uploads import refused_upload_names
from runner.images import read_lock
from runner.registry import REQUESTABLE
from runner.spec import RUNTIMES
from runner.units import size_words

LOG_READ_MAX = 1 << 20
# Offsets into a run's log: far beyond any cap, and within what a file seek takes.
LOG_OFFSET_MAX = 1 << 48
MAX_IDS = 64


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        # Before the lookup: a flood of guesses from a locked-out address costs no query.
        throttle.check_token_address(request)
        user = account_services.token_user(token=token)
        if user is None:
            throttle.token_failed(request)
            return None
        request.user = user
        return user


class BrowserSession(SessionAuth):
    """The browser's session, CSRF-checked. A request with no logged-in session is simply not
    authenticated by it (401, "log in"), not a CSRF failure (403)."""

    def _get_key(self, request: HttpRequest) -> str | None:
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)


api = DocumentedApi(
    title="Cordon API",
    version="1",
    urls_namespace="api",
    auth=[BearerToken(), BrowserSession()],
    throttle=[AuthRateThrottle()],
    docs_url="/docs",
    parser=StrictJsonParser(),
)


def _error(
    request: HttpRequest, status: int, code: str, message: str, field: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:  # fmt: skip
    response = api.create_response(request, error_payload(code, message, field), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return _error(request, exc.status, exc.code, exc.message, exc.field, headers=headers)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    location = [str(p) for p in first.get("loc", []) if p not in ("body", "payload", "query", "form", "file")]
    field = ".".join(location) or None
    about = describe_validation_error(first, field or "") or describe_egress_error(first, field or "")
    if about is not None:
        return _error(request, 422, *about, field)
    words = TYPE_WORDS.get(first.get("type", ""), str(first.get("msg", "invalid")))
    if first.get("type") == "string_pattern_mismatch":
        words = PATTERN_WORDS.get((first.get("ctx") or {}).get("pattern", ""), words)
    if field:
        return _error(request, 422, "invalid_request", f"{field}: {words}", field)
    # The body itself (bodies.BodyIn words its refusal "must be a JSON object, not ...").
    subject = "the request body " if words.startswith(("must", "is")) else ""
    return _error(request, 422, "invalid_request", f"{subject}{words}")


# Pydantic's refusal of a value of the wrong JSON type, in the API's words.
TYPE_WORDS = {
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be an array",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "missing": "is required",
}


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:  # ninja's "Cannot parse request body"
        why = str(exc.__cause__) if isinstance(exc.__cause__, MalformedJson) else str(exc)
        return _error(request, 400, "malformed_body", f"the request body could not be parsed: {why}")
    if exc.status_code == 403:  # the session's CSRF check: the only 403 ninja raises here
        return _error(request, 403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header of this session")
    return _error(request, exc.status_code, "http_error", str(exc))


@api.exception_handler(BodyTooLarge)
def _body_too_large(request: HttpRequest, exc: BodyTooLarge) -> HttpResponse:
    return _error(request, 413, "too_large", str(exc), exc.field)


@api.exception_handler(RequestDataTooBig)
def _data_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django's own cap on a body's non-file data (CORDON_REQUEST_MAX_BYTES, on every route).
    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(request, 413, "too_large", f"the request body is over the {size_words(cap)} limit")


@api.exception_handler(MultiPartParserError)
def _malformed_multipart(request: HttpRequest, exc: MultiPartParserError) -> HttpResponse:
    return _error(request, 400, "malformed_body", f"the multipart body could not be parsed: {exc}")


@api.exception_handler(Throttled)
def _throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
    headers = {"Retry-After": str(max(1, int(exc.wait) + 1))} if exc.wait else {}
    return _error(request, 429, "throttled", "too many requests; slow down", headers=headers)


@api.exception_handler(throttle.AuthThrottled)
def _auth_throttled(request: HttpRequest, exc: throttle.AuthThrottled) -> HttpResponse:
    return _error(request, 429, "throttled", exc.message, headers={"Retry-After": str(exc.retry_after_s)})


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "not_found", str(exc) or "not found")


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(request, 401, "unauthorized", "log in, or send Authorization: Bearer <token>")


# --- schemas ----------------------------------------------------------------------------


class ErrorOut(Schema):
    code: str
    message: str
    field: str | None = None


# What any operation may answer besides its own results: a body it cannot parse or that is too
# large, no (or a refused) login, throttling. Operations add their own 404/409/422.
COMMON_ERRORS = (400, 401, 403, 413, 429)


def _answers(ok: dict[int, Any], *errors: int) -> dict[int, Any]:
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


class RunIn(BodyIn):
    runtime: RuntimeName
    code: Text
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
    error: dict[str, Any] | None = Field(description="an uncaught exception: ename, evalue, traceback")
    displays_dropped: int


class RunOut(Schema):
    id: UUID
    state: str
    outcome: str | None
    outcome_text: str | None = Field(description="the outcome in plain words, as the pages show it")
    reason: str
    runtime: str
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


class LogOut(Schema):
    data: str
    offset: int
    next_offset: int
    complete: bool


def _run_out(run: Run, *, detail: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": run.id, "state": run.state, "outcome": run.outcome, "outcome_text": run.outcome_shown or None,
        "reason": run.reason, "runtime": run.runtime,
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
        "outputs": [_output_out(o) for o in run.outputs.all()],
        "limits": limits_from_record(run.limits).to_json(), "egress": run.egress, "created_at": run.created_at,
        "started_at": run.started_at, "finished_at": run.finished_at,
    }  # fmt: skip
    if detail:
        out.update(_cell_out(run))
        out["code"] = run.code
        out["events"] = [{"state": e.state, "at": e.at, "detail": e.detail} for e in run.events.all()]
        out["cleanup"] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in run.cleanup_checks.all()]
        out["samples"] = run.samples
        out["timings"] = run.timings
        out["egress_record"] = run.egress_record
    return out


def _cell_out(run: Run) -> dict[str, Any]:
    record = cell_selectors.run_cell(run=run)
    if record is None:
        return {"displays": [], "cell": None}
    displays = [
        {**{k: v for k, v in d.items() if k not in ("path", "size", "sha256")},
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
    }  # fmt: skip
    return {"displays": displays, "cell": cell}


def _output_out(output: RunOutputFile) -> dict[str, Any]:
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


# --- datasets ---------------------------------------------------------------------------

REPLACE_DOC = (
    "when a dataset of this name exists: true makes this upload the dataset of that name (new runs, notebook "
    "cells and assignments that named the earlier one read this one; runs made before keep theirs); false "
    "(the default) refuses it, 409 duplicate_name"
)


@api.post("/datasets", response=_answers({201: DatasetOut}, 409, 422), tags=["datasets"])
def dataset_upload(
    request: HttpRequest,
    file: UploadedFile | None = File(None),  # type: ignore[type-arg]  # noqa: B008
    replace: bool = Query(False, description=REPLACE_DOC),
) -> Status[Any]:
    upload = uploaded_file(request, file, "dataset")
    made = dataset_services.dataset_create(user=request.user, upload=upload, replace=replace)  # type: ignore[arg-type]
    return Status(201, made)


@api.get("/datasets", response=_answers({200: list[DatasetOut]}), tags=["datasets"])
def dataset_list(request: HttpRequest) -> Any:
    return dataset_selectors.dataset_list_for_user(user=request.user)  # type: ignore[arg-type]


@api.get("/datasets/{dataset_id}", response=_answers({200: DatasetOut}, 404, 422), tags=["datasets"])
def dataset_get(request: HttpRequest, dataset_id: UUID) -> Dataset:
    return dataset_selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]


@api.delete("/datasets/{dataset_id}", response=_answers({204: None}, 404, 422), tags=["datasets"])
def dataset_delete(request: HttpRequest, dataset_id: UUID) -> Status[Any]:
    dataset = dataset_selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]
    dataset_services.dataset_delete(dataset=dataset)
    return Status(204, None)


@api.get("/datasets/{dataset_id}/preview", response=_answers({200: DatasetPreviewOut}, 404, 422), tags=["datasets"])
def dataset_preview(request: HttpRequest, dataset_id: UUID, rows: int = PREVIEW_ROWS) -> dict[str, Any]:
    """The first bytes as text and, for a CSV, TSV or JSON table, its first rows typed (else no columns)."""
    dataset = dataset_selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]
    return dataset_selectors.dataset_preview(dataset=dataset, rows=rows)


# --- runs -------------------------------------------------------------------------------


@api.post("/runs", response=_answers({201: RunOut}, 404, 422, 503), tags=["runs"])
def run_create(request: HttpRequest, payload: RunIn) -> Status[Any]:
    run = run_services.run_create(
        user=request.user,  # type: ignore[arg-type]
        runtime=payload.runtime,
        code=payload.code,
        dataset_ids=payload.dataset_ids,
        output_ids=payload.output_ids,
        limits=limits_from_input(payload.limits),
        engine=payload.engine,
        egress=payload.egress,
    )
    return Status(201, _run_out(run))


@api.get("/runs", response=_answers({200: list[RunOut]}, 422), tags=["runs"])
def run_list(
    request: HttpRequest, state: str | None = None, outcome: str | None = None, runtime: str | None = None,
    limit: int = Query(50, ge=1, le=500),
) -> list[dict[str, Any]]:  # fmt: skip
    runs = run_selectors.run_list_for_user(user=request.user, state=state, outcome=outcome, runtime=runtime)  # type: ignore[arg-type]
    return [_run_out(r) for r in runs[:limit]]


# Staff may read any user's run (its record and code, log and outputs; cancel and rerun stay the
# owner's), and each such read is recorded (services/audit.py). The run page fetches the record
# several times and polls the log while a run is live, so those two are recorded once per run per
# staff member per window, not once per request; a page load and each output read are recorded every time.
STAFF_POLL_RECORD_WINDOW = timedelta(minutes=10)


def _record_staff_read(request: HttpRequest, run: Run, what: str, detail: str = "", polled: bool = False) -> None:
    if run.owner_id == request.user.pk:
        return
    if polled and run_selectors.staff_access_recorded_since(
        viewer=request.user, run=run, what=what, within=STAFF_POLL_RECORD_WINDOW
    ):
        return
    record_staff_access(viewer=request.user, owner=run.owner, what=what, run=run, detail=detail,
                        path=request.get_full_path())  # fmt: skip


@api.get("/runs/{run_id}", response=_answers({200: RunDetailOut}, 404, 422), tags=["runs"])
def run_get(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    run = run_selectors.run_get_for_viewer(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    _record_staff_read(request, run, "run record and code (API)", polled=True)
    return _run_out(run, detail=True)


@api.post("/runs/{run_id}/cancel", response=_answers({200: RunOut}, 404, 422), tags=["runs"])
def run_cancel(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    run = run_selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    return _run_out(run_services.run_cancel(run=run, by=request.user))  # type: ignore[arg-type]


@api.post("/runs/{run_id}/rerun", response=_answers({201: RunOut}, 404, 422, 503), tags=["runs"])
def run_rerun(request: HttpRequest, run_id: UUID) -> Status[Any]:
    run = run_selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    return Status(201, _run_out(run_services.run_rerun(run=run, by=request.user)))  # type: ignore[arg-type]


@api.get("/runs/{run_id}/log", response=_answers({200: LogOut}, 404, 422), tags=["runs"])
def run_log(
    request: HttpRequest, run_id: UUID, stream: Literal["stdout", "stderr"] = "stdout",
    offset: int = Query(0, ge=0, le=LOG_OFFSET_MAX), limit: int = Query(65536, ge=1, le=LOG_READ_MAX),
) -> dict[str, Any]:  # fmt: skip
    run = run_selectors.run_get_for_viewer(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    _record_staff_read(request, run, "log (API)", polled=True)
    data, next_offset, complete = run_selectors.run_log_read(run=run, stream=stream, offset=offset, limit=limit)
    return {"data": data.decode("utf-8", errors="replace"), "offset": offset, "next_offset": next_offset,
            "complete": complete}  # fmt: skip


# Registered ahead of the download below, whose `path:` name would take ".../preview" as a file name.
@api.get("/runs/{run_id}/outputs/{path:name}/preview", response=_answers({200: PreviewOut}, 404, 422),
         tags=["runs"])  # fmt: skip
def run_output_preview(request: HttpRequest, run_id: UUID, name: str, rows: int = PREVIEW_ROWS) -> Any:
    """The first rows of a CSV, TSV or JSON output as a typed table (422 not_tabular otherwise)."""
    try:
        output = run_selectors.output_get_for_viewer(user=request.user, run_id=run_id, name=name)  # type: ignore[arg-type]
    except Http404:
        # An output that is itself named ".../preview" is a download, as its URL says.
        return run_output(request, run_id, f"{name}/preview")
    _record_staff_read(request, output.run, "output preview", detail=output.name)
    with output.file.open("rb") as handle:
        return table_preview(handle, output.name, max_rows=rows)


@api.get(
    "/runs/{run_id}/outputs/{path:name}",
    response=_answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "the file, as an attachment",
                                         "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                             "format": "binary"}}}}}},
)  # fmt: skip
def run_output(request: HttpRequest, run_id: UUID, name: str) -> FileStream:
    output = run_selectors.output_get_for_viewer(user=request.user, run_id=run_id, name=name)  # type: ignore[arg-type]
    _record_staff_read(request, output.run, "output", detail=output.name)
    response = FileStream(output.file.open("rb"), as_attachment=True, filename=output.name.rsplit("/", 1)[-1],
                          content_type="application/octet-stream")  # fmt: skip
    return response  # nosniff, as on every response, from Django's SecurityMiddleware


# What an image output is served with: shown by an <img> of this site, never run as a document. A
# sandboxed, script-less policy (an SVG opened on its own gets a unique origin and runs nothing),
# readable only by this origin's pages.
IMAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "private, max-age=3600",
}


def _inline_image(handle: Any, content_type: str) -> FileStream:
    """An image of this site (an output, a cell's display, an imported output) as IMAGE_HEADERS say."""
    response = FileStream(handle, content_type=content_type)
    response["Content-Disposition"] = "inline"
    for header, value in IMAGE_HEADERS.items():
        response[header] = value
    return response


@api.get(
    "/runs/{run_id}/images/{path:name}",
    response=_answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "a PNG, JPEG, GIF, WebP or SVG output, inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def run_output_image(request: HttpRequest, run_id: UUID, name: str) -> FileStream:
    output = run_selectors.output_get_for_viewer(user=request.user, run_id=run_id, name=name)  # type: ignore[arg-type]
    _record_staff_read(request, output.run, "output image", detail=output.name)
    content_type = image_content_type(output.name)
    if content_type is None:
        raise ServiceError("not_an_image", f"{output.name!r} is not an image; download it instead", status=422)
    return _inline_image(output.file.open("rb"), content_type)


@api.get(
    "/runs/{run_id}/displays/{index}",
    response=_answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "an image a notebook cell displayed (PNG, JPEG or SVG), inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def run_display_image(request: HttpRequest, run_id: UUID, index: int) -> FileStream:
    run = run_selectors.run_get_for_viewer(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    display = cell_selectors.displayed_image(run=run, index=index)
    _record_staff_read(request, run, "displayed image", detail=str(index))
    return _inline_image(default_storage.open(display["path"], "rb"), display["mime"])


# --- notebooks --------------------------------------------------------------------------


CellId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class DatasetRef(BodyIn):
    kind: Literal["dataset"]
    id: UUID


class OutputRef(BodyIn):
    kind: Literal["output"]
    id: OutputId


class CellIn(BodyIn):
    id: CellId
    kind: Literal["code", "markdown"] = "code"
    runtime: RuntimeName = "python"
    source: Text = ""
    inputs: list[Annotated[DatasetRef | OutputRef, Field(discriminator="kind")]] = Field(
        default=[], max_length=notebook_services.MAX_INPUTS
    )
    # Only the limits set for this cell (the others take their defaults when it runs).
    limits: CellLimitsIn = Field(default_factory=CellLimitsIn)  # type: ignore[valid-type]
    # Checked for shape here, against today's ceiling when the cell runs (a ceiling may change meanwhile).
    egress: EgressPolicy = []
    last_run_id: UUID | None = Field(None, description="read-only: set by running the cell, emptied by clearing it")


NotebookName = Annotated[str, Field(min_length=1, max_length=100, pattern=NOT_BLANK)]
Cells = Annotated[list[CellIn], Field(max_length=notebook_services.MAX_CELLS)]


class NotebookCreateIn(BodyIn):
    name: NotebookName
    cells: Cells | None = None
    dataset_ids: list[UUID] | None = Field(
        None, max_length=notebook_services.MAX_INPUTS, description="the notebook's own inputs (see PUT)"
    )


class NotebookPutIn(BodyIn):
    name: NotebookName
    version: Int = Field(ge=1, le=JSON_INT_MAX, description="the version this page read; a stale one is refused (409)")
    cells: Cells
    dataset_ids: list[UUID] | None = Field(
        None, max_length=notebook_services.MAX_INPUTS,
        description="the notebook's own inputs (every code cell sees them under /input); omitted: unchanged",
    )  # fmt: skip


class InputFixOut(Schema):
    kind: Literal["dataset"]
    id: UUID
    name: str


class InputOut(Schema):
    kind: Literal["dataset", "output"]
    id: UUID | int
    name: str
    broken: bool = Field(description="its dataset or output no longer exists")
    fix: InputFixOut | None = Field(description="when broken: your current dataset of the same name, if any")


class CellOut(Schema):
    id: str
    kind: str
    runtime: str
    source: str
    inputs: list[InputOut]
    limits: LimitsSet
    egress: list[str] = Field(description="the destinations the cell's runs may reach (empty: no network)")
    last_run_id: UUID | None
    html: str | None = Field(description="a markdown cell, rendered and sanitised on the server")
    stale: bool = Field(description="its run is out of date: its code, or the state it started from, changed since")
    stale_why: str = Field(description="why it is stale, in words")
    starts_from: StartsFromOut | None = Field(
        description="the run whose state it starts from if run now (null: nothing)"
    )
    imported: list[ImportedOutputOut] = Field(
        [], description="outputs an imported .ipynb had for this cell, shown until the cell runs"
    )
    fresh_start: str = Field(
        description="why it starts from nothing although a cell above has state (a runtime change)"
    )


class ImportedOutputOut(Schema):
    mime: str
    text: str | None = None
    html: str | None = None
    url: str | None = None
    plain: str = ""
    stream: str | None = Field(None, description='"stdout" or "stderr" for a stream')
    error: dict[str, str] | None = Field(None, description="an error's ename and evalue (its traceback is `text`)")


class NotebookStateOut(Schema):
    starts_from: StartsFromOut | None = Field(description="the run a new cell at the end would start from")
    variables: list[VariableOut]
    not_carried: list[NotCarriedOut]
    modules: dict[str, str]
    bytes: int | None


class NotebookOut(Schema):
    id: UUID
    name: str
    version: int
    created_at: datetime
    updated_at: datetime
    cells: list[CellOut]
    inputs: list[InputOut] = Field(description="the notebook's own inputs: every code cell sees them under /input")
    restarted_at: datetime | None = Field(description="the last Restart: runs before it pass no state down")
    state: NotebookStateOut = Field(description="the variables a new cell at the end would start with")


class NotebookSummaryOut(Schema):
    id: UUID
    name: str
    cell_count: int
    created_at: datetime
    updated_at: datetime


def _notebook(request: HttpRequest, notebook_id: UUID) -> Notebook:
    return notebook_selectors.notebook_get_for_user(user=request.user, notebook_id=notebook_id)  # type: ignore[arg-type]


def _cells(cells: list[CellIn]) -> list[dict[str, Any]]:
    return [{**cell.model_dump(), "limits": limits_set(cell.limits)} for cell in cells]


@api.get("/notebooks", response=_answers({200: list[NotebookSummaryOut]}), tags=["notebooks"])
def notebook_list(request: HttpRequest) -> list[dict[str, Any]]:
    notebooks = notebook_selectors.notebook_list_for_user(user=request.user)  # type: ignore[arg-type]
    return [{"id": n.id, "name": n.name, "cell_count": n.cell_count, "created_at": n.created_at,
             "updated_at": n.updated_at} for n in notebooks]  # fmt: skip


@api.post("/notebooks", response=_answers({201: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_create(request: HttpRequest, payload: NotebookCreateIn) -> Status[Any]:
    cells = None if payload.cells is None else _cells(payload.cells)
    notebook = notebook_services.notebook_create(
        user=request.user,  # type: ignore[arg-type]
        name=payload.name, cells=cells, dataset_ids=payload.dataset_ids,
    )  # fmt: skip
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@api.post("/notebooks/import", response=_answers({201: NotebookOut}, 409, 422), tags=["notebooks"])
def notebook_import(request: HttpRequest, file: UploadedFile | None = File(None)) -> Status[Any]:  # type: ignore[type-arg]  # noqa: B008
    """A .ipynb notebook (its code and markdown cells) or a .py or .js script (one code cell)."""
    if file is None:
        raise ServiceError("file_required", "send the file as a multipart field named 'file'", field="file", status=422)
    notebook = notebook_services.notebook_import(user=request.user, upload=file)  # type: ignore[arg-type]
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@api.get("/notebooks/{notebook_id}", response=_answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_get(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    return notebook_selectors.notebook_view(notebook=_notebook(request, notebook_id))


@api.put("/notebooks/{notebook_id}", response=_answers({200: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_put(request: HttpRequest, notebook_id: UUID, payload: NotebookPutIn) -> dict[str, Any]:
    """Replace the name and cells (the page's autosave). `last_run_id` is not changed by a save."""
    notebook = notebook_services.notebook_save(
        notebook=_notebook(request, notebook_id), name=payload.name, version=payload.version,
        cells=_cells(payload.cells), dataset_ids=payload.dataset_ids,
    )  # fmt: skip
    return notebook_selectors.notebook_view(notebook=notebook)


@api.delete("/notebooks/{notebook_id}", response=_answers({204: None}, 404, 422), tags=["notebooks"])
def notebook_delete(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    notebook_services.notebook_delete(notebook=_notebook(request, notebook_id))
    return Status(204, None)


@api.post("/notebooks/{notebook_id}/duplicate", response=_answers({201: NotebookOut}, 404, 409, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_duplicate(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    copy = notebook_services.notebook_duplicate(notebook=_notebook(request, notebook_id))
    return Status(201, notebook_selectors.notebook_view(notebook=copy))


@api.post("/notebooks/{notebook_id}/cells/{cell_id}/run", response=_answers({201: RunOut}, 404, 422, 503),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_run(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> Status[Any]:
    """Run a code cell as it is stored (save first) and record the run as the cell's last."""
    run = notebook_services.cell_run(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return Status(201, _run_out(run))


@api.get(
    "/notebooks/{notebook_id}/cells/{cell_id}/imported/{index}",
    response=_answers({200: None}, 404, 422),
    tags=["notebooks"],
    openapi_extra={"responses": {200: {"description": "an image an imported cell's outputs kept (PNG or JPEG), inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def notebook_imported_image(request: HttpRequest, notebook_id: UUID, cell_id: CellId, index: int) -> FileStream:
    output = notebook_selectors.imported_image(notebook=_notebook(request, notebook_id), cell_id=cell_id, index=index)
    return _inline_image(default_storage.open(output["path"], "rb"), output["mime"])


@api.post("/notebooks/{notebook_id}/restart", response=_answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_restart(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    """Restart (clear state): every run so far passes no state down; cells run again start from nothing."""
    notebook = notebook_services.notebook_restart(notebook=_notebook(request, notebook_id))
    return notebook_selectors.notebook_view(notebook=notebook)


@api.post("/notebooks/{notebook_id}/cells/{cell_id}/clear", response=_answers({200: NotebookOut}, 404, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_clear(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> dict[str, Any]:
    notebook = notebook_services.cell_clear(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return notebook_selectors.notebook_view(notebook=notebook)


@api.get(
    "/notebooks/{notebook_id}/ipynb",
    response=_answers({200: None}, 404, 422),
    tags=["notebooks"],
    openapi_extra={"responses": {200: {"description": "the notebook as a Jupyter .ipynb file (nbformat 4)",
                                         "content": {"application/x-ipynb+json": {"schema": {"type": "object"}}}}}},
)  # fmt: skip
def notebook_export(request: HttpRequest, notebook_id: UUID) -> HttpResponse:
    notebook = _notebook(request, notebook_id)
    budget = cell_selectors.ExportBudget()  # every cell's outputs together, so an export's size is bounded

    def outputs_for(run_id: str) -> list[dict[str, Any]]:
        return cell_selectors.run_outputs_for_export(user=notebook.owner, run_id=run_id, budget=budget)

    document = ipynb_from_cells(notebook.name, notebook.cells, outputs_for, notebook.inputs)
    response = HttpResponse(document, content_type="application/x-ipynb+json")
    response["Content-Disposition"] = content_disposition_header(True, f"{notebook.name}.ipynb") or "attachment"
    return response


# --- limits, images and health ----------------------------------------------------------


@api.get("/limits", response=_answers({200: list[LimitOut]}), tags=["service"])
def limits(request: HttpRequest) -> list[dict[str, Any]]:
    """Every limit a run takes: its unit, default and the maximum on this service."""
    return limits_described()


class EgressCeilingOut(Schema):
    ceiling: list[str] = Field(description="the destinations any run's egress policy may name at most (empty: none)")


@api.get("/egress", response=_answers({200: EgressCeilingOut}), tags=["service"])
def egress_ceiling(request: HttpRequest) -> dict[str, Any]:
    """This service's egress ceiling: a run's policy (and a course's ceiling) must be within it."""
    return {"ceiling": site_ceiling().to_json()}


@api.get("/images", response=_answers({200: list[ImageOut]}), tags=["service"])
def images(request: HttpRequest) -> list[dict[str, str]]:
    return [{"name": name, "digest": entry.digest} for name, entry in sorted(read_lock().items())]


class HealthOut(Schema):
    ok: bool


@api.get("/health", auth=None, response={200: HealthOut, 429: ErrorOut}, tags=["service"])
def health(request: HttpRequest) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"ok": True}
