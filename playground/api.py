"""The HTTP API (django-ninja) under /api/, docs at /api/docs. Thin: parse, call a service or a
selector, shape the answer. Errors are JSON {"code", "message", "field"}."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from ninja import File, NinjaAPI, Schema, Status
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.files import UploadedFile
from ninja.security import HttpBearer, django_auth
from ninja.throttling import AuthRateThrottle

from playground import selectors, services
from playground.models import Dataset, Run, RunOutputFile
from playground.services import ServiceError
from playground.uploads import raw_upload_names
from runner.images import read_lock

LOG_READ_MAX = 1 << 20


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = services.token_user(token=token)
        if user is not None:
            request.user = user
        return user


api = NinjaAPI(
    title="Cordon API",
    version="1",
    urls_namespace="api",
    auth=[BearerToken(), django_auth],  # django_auth: the browser's session, CSRF-checked
    throttle=[AuthRateThrottle()],
    docs_url="/docs",
)


def _error(request: HttpRequest, status: int, code: str, message: str, field: str | None = None) -> HttpResponse:
    return api.create_response(request, {"code": code, "message": message, "field": field}, status=status)


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return _error(request, exc.status, exc.code, exc.message, exc.field)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    location = [str(p) for p in first.get("loc", []) if p not in ("body", "payload", "query", "form", "file")]
    field = ".".join(location) or None
    message = f"{field}: {first.get('msg', 'invalid')}" if field else str(first.get("msg", "invalid request"))
    return _error(request, 422, "invalid_request", message, field)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:  # ninja's "Cannot parse request body"
        return _error(request, 400, "malformed_body", f"the request body could not be parsed: {exc}")
    return _error(request, exc.status_code, "http_error", str(exc))


@api.exception_handler(Throttled)
def _throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
    return _error(request, 429, "throttled", "too many requests; slow down")


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


class DatasetOut(Schema):
    id: UUID
    name: str
    size: int
    sha256: str
    sniffed_type: str
    created_at: datetime


class RunIn(Schema):
    runtime: str
    code: str
    dataset_ids: list[UUID] = []
    output_ids: list[int] = []
    limits: dict[str, Any] = {}
    engine: str = "auto"


class OutputOut(Schema):
    id: int
    name: str
    size: int
    sha256: str
    url: str | None


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


class RunOut(Schema):
    id: UUID
    state: str
    outcome: str | None
    reason: str
    runtime: str
    exit_code: int | None
    signal: int | None
    wall_s: float | None
    cpu_s: float | None
    peak_memory_bytes: int | None
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    engine: str
    engine_version: str
    engine_note: str
    isolation: str
    image: ImageOut | None
    cleanup_ok: bool | None
    charged: bool | None
    error: ErrorOut | None
    retry_of: UUID | None
    retries: list[UUID]
    outputs: list[OutputOut]
    limits: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDetailOut(RunOut):
    code: str
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
        "id": run.id, "state": run.state, "outcome": run.outcome, "reason": run.reason, "runtime": run.runtime,
        "exit_code": run.exit_code, "signal": run.signal, "wall_s": run.wall_s, "cpu_s": run.cpu_s,
        "peak_memory_bytes": run.peak_memory_bytes, "stdout_bytes": run.stdout_bytes,
        "stderr_bytes": run.stderr_bytes, "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated, "engine": run.engine, "engine_version": run.engine_version,
        "engine_note": run.engine_note, "isolation": run.isolation,
        "image": {"name": run.image_name, "digest": run.image_digest} if run.image_digest else None,
        "cleanup_ok": run.cleanup_ok, "charged": run.charged,
        "error": {"code": run.error_code, "message": run.error_message, "field": None} if run.error_code else None,
        "retry_of": run.retry_of_id, "retries": [r.id for r in run.retries.all()],
        "outputs": [_output_out(o) for o in run.outputs.all()],
        "limits": services.limits_to_api(run.limits), "created_at": run.created_at,
        "started_at": run.started_at, "finished_at": run.finished_at,
    }  # fmt: skip
    if detail:
        out["code"] = run.code
        out["events"] = [{"state": e.state, "at": e.at, "detail": e.detail} for e in run.events.all()]
        out["cleanup"] = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in run.cleanup_checks.all()]
        out["samples"] = run.samples
    return out


def _output_out(output: RunOutputFile) -> dict[str, Any]:
    url = f"/api/runs/{output.run_id}/outputs/{output.name}" if output.file else None
    return {"id": output.id, "name": output.name, "size": output.size, "sha256": output.sha256, "url": url}


# --- datasets ---------------------------------------------------------------------------


@api.post("/datasets", response={201: DatasetOut, 400: ErrorOut, 409: ErrorOut, 413: ErrorOut}, tags=["datasets"])
def dataset_upload(request: HttpRequest, file: UploadedFile = File(...)) -> Status[Any]:  # type: ignore[type-arg]  # noqa: B008
    for sent in raw_upload_names(request):
        if "/" in sent or "\\" in sent:
            raise ServiceError("unsafe_name", f"file name {sent!r} looks like a path; send a plain name", field="file")
    return Status(201, services.dataset_create(user=request.user, upload=file))  # type: ignore[arg-type]


@api.get("/datasets", response=list[DatasetOut], tags=["datasets"])
def dataset_list(request: HttpRequest) -> Any:
    return selectors.dataset_list_for_user(user=request.user)  # type: ignore[arg-type]


@api.get("/datasets/{dataset_id}", response={200: DatasetOut, 404: ErrorOut}, tags=["datasets"])
def dataset_get(request: HttpRequest, dataset_id: UUID) -> Dataset:
    return selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]


@api.delete("/datasets/{dataset_id}", response={204: None, 404: ErrorOut}, tags=["datasets"])
def dataset_delete(request: HttpRequest, dataset_id: UUID) -> Status[Any]:
    dataset = selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]
    services.dataset_delete(dataset=dataset)
    return Status(204, None)


# --- runs -------------------------------------------------------------------------------


@api.post("/runs", response={201: RunOut, 404: ErrorOut, 422: ErrorOut, 429: ErrorOut}, tags=["runs"])
def run_create(request: HttpRequest, payload: RunIn) -> Status[Any]:
    run = services.run_create(
        user=request.user,  # type: ignore[arg-type]
        runtime=payload.runtime,
        code=payload.code,
        dataset_ids=payload.dataset_ids,
        output_ids=payload.output_ids,
        limits=payload.limits,
        engine=payload.engine,
    )
    return Status(201, _run_out(run))


@api.get("/runs", response=list[RunOut], tags=["runs"])
def run_list(
    request: HttpRequest, state: str | None = None, outcome: str | None = None, runtime: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:  # fmt: skip
    runs = selectors.run_list_for_user(user=request.user, state=state, outcome=outcome, runtime=runtime)  # type: ignore[arg-type]
    return [_run_out(r) for r in runs[: max(1, min(limit, 500))]]


@api.get("/runs/{run_id}", response={200: RunDetailOut, 404: ErrorOut}, tags=["runs"])
def run_get(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    return _run_out(selectors.run_get_for_user(user=request.user, run_id=run_id), detail=True)  # type: ignore[arg-type]


@api.post("/runs/{run_id}/cancel", response={200: RunOut, 404: ErrorOut}, tags=["runs"])
def run_cancel(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    return _run_out(services.run_cancel(run=run, by=request.user))  # type: ignore[arg-type]


@api.post("/runs/{run_id}/rerun", response={201: RunOut, 404: ErrorOut, 422: ErrorOut, 429: ErrorOut}, tags=["runs"])
def run_rerun(request: HttpRequest, run_id: UUID) -> Status[Any]:
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    return Status(201, _run_out(services.run_rerun(run=run, by=request.user)))  # type: ignore[arg-type]


@api.get("/runs/{run_id}/log", response={200: LogOut, 404: ErrorOut, 422: ErrorOut}, tags=["runs"])
def run_log(
    request: HttpRequest, run_id: UUID, stream: Literal["stdout", "stderr"] = "stdout", offset: int = 0,
    limit: int = 65536,
) -> dict[str, Any]:  # fmt: skip
    if offset < 0 or not 0 < limit <= LOG_READ_MAX:
        raise ServiceError(
            "invalid_range", f"offset must be >= 0 and limit 1..{LOG_READ_MAX}", field="offset", status=422
        )
    run = selectors.run_get_for_user(user=request.user, run_id=run_id)  # type: ignore[arg-type]
    data, next_offset, complete = selectors.run_log_read(run=run, stream=stream, offset=offset, limit=limit)
    return {"data": data.decode("utf-8", errors="replace"), "offset": offset, "next_offset": next_offset,
            "complete": complete}  # fmt: skip


@api.get("/runs/{run_id}/outputs/{path:name}", response={404: ErrorOut}, tags=["runs"])
def run_output(request: HttpRequest, run_id: UUID, name: str) -> FileResponse:
    output = selectors.output_get_for_user(user=request.user, run_id=run_id, name=name)  # type: ignore[arg-type]
    response = FileResponse(output.file.open("rb"), as_attachment=True, filename=output.name.rsplit("/", 1)[-1],
                            content_type="application/octet-stream")  # fmt: skip
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- notebook ---------------------------------------------------------------------------


class NotebookIO(Schema):
    cells: list[dict[str, Any]]


@api.get("/notebook", response=NotebookIO, tags=["notebook"])
def notebook_get(request: HttpRequest) -> dict[str, Any]:
    return {"cells": selectors.notebook_for_user(user=request.user).cells}  # type: ignore[arg-type]


@api.put("/notebook", response={200: NotebookIO, 422: ErrorOut}, tags=["notebook"])
def notebook_put(request: HttpRequest, payload: NotebookIO) -> dict[str, Any]:
    return {"cells": services.notebook_save(user=request.user, cells=payload.cells).cells}  # type: ignore[arg-type]


@api.get("/datasets/{dataset_id}/preview", response={200: dict[str, str], 404: ErrorOut}, tags=["datasets"])
def dataset_preview(request: HttpRequest, dataset_id: UUID) -> dict[str, str]:
    dataset = selectors.dataset_get_for_user(user=request.user, dataset_id=dataset_id)  # type: ignore[arg-type]
    return {"text": selectors.dataset_preview(dataset=dataset)}


# --- images and health ------------------------------------------------------------------


@api.get("/images", response=list[ImageOut], tags=["service"])
def images(request: HttpRequest) -> list[dict[str, str]]:
    return [{"name": name, "digest": entry.digest} for name, entry in sorted(read_lock().items())]


@api.get("/health", auth=None, tags=["service"])
def health(request: HttpRequest) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"ok": True}
