"""/api/runs: a run made, listed, read (its detail, log, outputs and images, its receipt), waited
for, cancelled and run again; and /api/receipts/key, the public key that checks receipts."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.files.storage import default_storage
from django.http import Http404, HttpRequest
from ninja import Router, Status
from ninja.params.functions import Query

from playground.api.schemas import (
    PREVIEW_ROWS,
    LogOut,
    PreviewOut,
    ReceiptKeyOut,
    ReceiptOut,
    RunDetailOut,
    RunIn,
    RunOut,
    answers,
    inline_image,
    run_out,
)
from playground.downloads import FileStream
from playground.errors import ServiceError
from playground.limits import (
    limits_from_input,
)
from playground.live import run_group
from playground.models import ACTIVE_STATES, Run
from playground.previews import image_content_type, table_preview
from playground.selectors import cells as cell_selectors
from playground.selectors import receipts as receipt_selectors
from playground.selectors import runs as run_selectors
from playground.services import runs as run_services
from playground.services.audit import record_staff_access
from playground.signed_in import signed_in

router = Router()

LOG_READ_MAX = 1 << 20
# Offsets into a run's log: far beyond any cap, and within what a file seek takes.
LOG_OFFSET_MAX = 1 << 48


@router.post("/runs", response=answers({201: RunOut}, 404, 422, 503), tags=["runs"])
def run_create(request: HttpRequest, payload: RunIn) -> Status[Any]:
    run = run_services.run_create(
        user=signed_in(request),
        runtime=payload.runtime,
        code=payload.code,
        dataset_ids=payload.dataset_ids,
        output_ids=payload.output_ids,
        limits=limits_from_input(payload.limits),
        engine=payload.engine,
        egress=payload.egress,
        environment=payload.environment,
    )
    return Status(201, run_out(run))


@router.get("/runs", response=answers({200: list[RunOut]}, 422), tags=["runs"])
def run_list(
    request: HttpRequest, state: str | None = None, outcome: str | None = None, runtime: str | None = None,
    limit: int = Query(50, ge=1, le=500),
) -> list[dict[str, Any]]:  # fmt: skip
    runs = run_selectors.run_list_for_user(user=signed_in(request), state=state, outcome=outcome, runtime=runtime)
    return [run_out(r) for r in runs[:limit]]


# Staff may read any user's run (its record and code, log and outputs; cancel and rerun stay the
# owner's), and each such read is recorded (services/audit.py). The run page fetches the record
# several times and polls the log while a run is live: those two are polled reads; a page load and
# each output read are recorded every time.
def _record_staff_read(request: HttpRequest, run: Run, what: str, detail: str = "", polled: bool = False) -> None:
    record_staff_access(viewer=request.user, owner=run.owner, what=what, run=run, detail=detail,
                        path=request.get_full_path(), polled=polled)  # fmt: skip


@router.get("/runs/{run_id}", response=answers({200: RunDetailOut}, 404, 422), tags=["runs"])
def run_get(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    return _run_detail(request, run_id)


# A long poll: a client that waits for a run's end asks once and is answered when the worker
# publishes it (the run's live group, as the run page's socket is), not at its next poll. The row is
# read again every WAIT_RECHECK_S besides (a message can be missed: a full channel, an end the
# reaper wrote), and one web process serves at most WAITS_PER_USER waits of one user at once. It
# is async: a waiting request holds no thread, so no number of them slows anyone else's requests.
WAIT_MAX_S = 60.0
WAIT_RECHECK_S = 1.0
WAITS_PER_USER = 64
_waits: Counter[int] = Counter()


@router.get("/runs/{run_id}/wait", response=answers({200: RunDetailOut}, 404, 422, 429), tags=["runs"])
async def run_wait(
    request: HttpRequest, run_id: UUID, timeout_s: float = Query(30.0, ge=0, le=WAIT_MAX_S)
) -> dict[str, Any]:
    """The run's record as soon as it has finished, or once `timeout_s` has passed (then its
    `state` says it has not): GET /runs/{run_id} without polling it."""
    who = int(request.user.pk or 0)
    if _waits[who] >= WAITS_PER_USER:
        raise ServiceError("too_many_waits", f"at most {WAITS_PER_USER} waits at once; poll GET /api/runs/{{id}}",
                           status=429, retry_after_s=1)  # fmt: skip
    _waits[who] += 1
    try:
        return await _until_finished(request, run_id, timeout_s)
    finally:
        _waits[who] -= 1
        if _waits[who] <= 0:
            del _waits[who]


def _run_detail(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    """GET /runs/{run_id}'s answer, in one trip to the synchronous thread (every wait shares it)."""
    run = run_selectors.run_get_for_viewer(user=signed_in(request), run_id=run_id)
    _record_staff_read(request, run, "run record and code (API)", polled=True)
    return run_out(run, detail=True)


def _run_state(request: HttpRequest, run_id: UUID) -> str:
    return run_selectors.run_state_for_viewer(user=signed_in(request), run_id=run_id)


async def _until_finished(request: HttpRequest, run_id: UUID, timeout_s: float) -> dict[str, Any]:
    """The run's record once it says the run has finished, or after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    layer, group = get_channel_layer(), run_group(run_id)
    channel = await layer.new_channel() if layer is not None else ""
    if layer is not None:
        await layer.group_add(group, channel)  # before the row is read: an end published after it is heard
    try:
        heard = False
        while True:
            # The state alone until the run has finished, its whole record once; after its final
            # message, the record at once (a retried run's says it is queued again: wait on).
            out = await sync_to_async(_run_detail)(request, run_id) if heard else None
            # 404 for a run the user may not see
            state = out["state"] if out is not None else await sync_to_async(_run_state)(request, run_id)
            left = deadline - loop.time()
            if state not in ACTIVE_STATES or left <= 0:
                return out if out is not None else await sync_to_async(_run_detail)(request, run_id)
            waiting = _final_heard(layer, channel) if layer is not None else asyncio.sleep(WAIT_RECHECK_S)
            try:
                await asyncio.wait_for(waiting, timeout=min(left, WAIT_RECHECK_S))
            except TimeoutError:
                heard = False
            else:
                heard = layer is not None
    finally:
        if layer is not None:
            await layer.group_discard(group, channel)


async def _final_heard(layer: Any, channel: str) -> None:
    """Until the run's group carries its `final` message (then its row says how it ended; a run
    retried after a sandbox error is queued again, and the wait goes on)."""
    while True:
        event = await layer.receive(channel)
        message = event.get("message") if isinstance(event, dict) else None
        if isinstance(message, dict) and message.get("type") == "final":
            return


@router.get("/runs/{run_id}/receipt", response=answers({200: ReceiptOut}, 404, 409, 422), tags=["receipts"])
def run_receipt(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    """The finished run's signed receipt (metadata only: no code, no data), for whoever may read
    the run; 409 run_not_finished before its end. Check it offline with
    `python -m runner receipt verify FILE --key KEY`, KEY from GET /api/receipts/key."""
    return receipt_selectors.receipt_for_viewer(user=signed_in(request), run_id=run_id)


@router.get("/receipts/key", auth=None, response=answers({200: ReceiptKeyOut}), tags=["receipts"])
def receipt_key(request: HttpRequest) -> dict[str, str]:
    """The public key that checks this site's run receipts; anyone may read it."""
    return receipt_selectors.site_public_key()


@router.post("/runs/{run_id}/cancel", response=answers({200: RunOut}, 404, 422), tags=["runs"])
def run_cancel(request: HttpRequest, run_id: UUID) -> dict[str, Any]:
    run = run_selectors.run_get_for_user(user=signed_in(request), run_id=run_id)
    return run_out(run_services.run_cancel(run=run, by=signed_in(request)))


@router.post("/runs/{run_id}/rerun", response=answers({201: RunOut}, 404, 422, 503), tags=["runs"])
def run_rerun(request: HttpRequest, run_id: UUID) -> Status[Any]:
    run = run_selectors.run_get_for_user(user=signed_in(request), run_id=run_id)
    return Status(201, run_out(run_services.run_rerun(run=run, by=signed_in(request))))


@router.get("/runs/{run_id}/log", response=answers({200: LogOut}, 404, 422), tags=["runs"])
def run_log(
    request: HttpRequest, run_id: UUID, stream: Literal["stdout", "stderr"] = "stdout",
    offset: int = Query(0, ge=0, le=LOG_OFFSET_MAX), limit: int = Query(65536, ge=1, le=LOG_READ_MAX),
) -> dict[str, Any]:  # fmt: skip
    run = run_selectors.run_get_for_viewer(user=signed_in(request), run_id=run_id)
    _record_staff_read(request, run, "log (API)", polled=True)
    data, next_offset, complete = run_selectors.run_log_read(run=run, stream=stream, offset=offset, limit=limit)
    return {"data": data.decode("utf-8", errors="replace"), "offset": offset, "next_offset": next_offset,
            "complete": complete}  # fmt: skip


# Registered ahead of the download below, whose `path:` name would take ".../preview" as a file name.
@router.get("/runs/{run_id}/outputs/{path:name}/preview", response=answers({200: PreviewOut}, 404, 422),
         tags=["runs"])  # fmt: skip
def run_output_preview(request: HttpRequest, run_id: UUID, name: str, rows: int = PREVIEW_ROWS) -> Any:
    """The first rows of a CSV, TSV or JSON output as a typed table (422 not_tabular otherwise)."""
    try:
        output = run_selectors.output_get_for_viewer(user=signed_in(request), run_id=run_id, name=name)
    except Http404:
        # An output that is itself named ".../preview" is a download, as its URL says.
        return run_output(request, run_id, f"{name}/preview")
    _record_staff_read(request, output.run, "output preview", detail=output.name)
    with output.file.open("rb") as handle:
        return table_preview(handle, output.name, max_rows=rows)


@router.get(
    "/runs/{run_id}/outputs/{path:name}",
    response=answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "the file, as an attachment",
                                         "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                             "format": "binary"}}}}}},
)  # fmt: skip
def run_output(request: HttpRequest, run_id: UUID, name: str) -> FileStream:
    output = run_selectors.output_get_for_viewer(user=signed_in(request), run_id=run_id, name=name)
    _record_staff_read(request, output.run, "output", detail=output.name)
    response = FileStream(output.file.open("rb"), as_attachment=True, filename=output.name.rsplit("/", 1)[-1],
                          content_type="application/octet-stream")  # fmt: skip
    return response  # nosniff, as on every response, from Django's SecurityMiddleware


@router.get(
    "/runs/{run_id}/images/{path:name}",
    response=answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "a PNG, JPEG, GIF, WebP or SVG output, inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def run_output_image(request: HttpRequest, run_id: UUID, name: str) -> FileStream:
    output = run_selectors.output_get_for_viewer(user=signed_in(request), run_id=run_id, name=name)
    _record_staff_read(request, output.run, "output image", detail=output.name)
    content_type = image_content_type(output.name)
    if content_type is None:
        raise ServiceError("not_an_image", f"{output.name!r} is not an image; download it instead", status=422)
    return inline_image(output.file.open("rb"), content_type)


@router.get(
    "/runs/{run_id}/displays/{index}",
    response=answers({200: None}, 404, 422),
    tags=["runs"],
    openapi_extra={"responses": {200: {"description": "an image a notebook cell displayed (PNG, JPEG or SVG), inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def run_display_image(request: HttpRequest, run_id: UUID, index: int) -> FileStream:
    run = run_selectors.run_get_for_viewer(user=signed_in(request), run_id=run_id)
    display = cell_selectors.displayed_image(run=run, index=index)
    _record_staff_read(request, run, "displayed image", detail=str(index))
    return inline_image(default_storage.open(display["path"], "rb"), display["mime"])
