"""Celery tasks: thin. They take ids, load the row and call the supervisor and services."""

from __future__ import annotations

import codecs
import logging
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer

from playground import services
from playground.models import ACTIVE_STATES, Run
from runner.spec import Limits, RunSpec
from runner.supervisor import Supervisor

log = logging.getLogger(__name__)
HEARTBEAT_S = 3.0
CANCEL_POLL_S = 0.25
BATCH_S = 0.05
BATCH_BYTES = 16 * 1024


class RunPublisher:
    """Turns supervisor events into the stored log, state rows, samples and live messages.

    The stored, capped log is the truth; live messages (channel group `run.<id>`) are best
    effort, batched to about 50 ms or 16 KiB, typed and carrying their byte offset. A message
    holds whole characters only: `offset` and `length` count the bytes its text decodes from.
    """

    def __init__(self, run: Run):
        self.run = run
        self.group = f"run.{run.id}"
        self.layer = get_channel_layer()
        self.samples: list[list[float | None]] = []
        self.pending: dict[str, tuple[int, bytearray]] = {}
        self.pending_since = 0.0
        self.next_heartbeat = 0.0
        self.cancel = False
        self.next_cancel_poll = 0.0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "chunk":
            self._chunk(event["stream"], event["offset"], event["data"])
        elif kind == "state":
            self.flush()
            if services.run_advance(run=self.run, state=event["state"], detail=_detail(event)):
                self.send({"type": "state", "state": event["state"], "time": time.time()})
        elif kind == "sample":
            self.samples.append([event["t"], event["cpu_s"], event["memory_bytes"]])
        elif kind == "final":
            self.flush(final=True)
        self._maybe_heartbeat()

    def _chunk(self, stream: str, offset: int, data: bytes) -> None:
        services.log_append(run_id=self.run.id, stream=stream, offset=offset, data=data)
        start, buffer = self.pending.get(stream, (offset, bytearray()))
        if not buffer:
            start = offset
        buffer += data
        self.pending[stream] = (start, buffer)
        now = time.monotonic()
        if not self.pending_since:
            self.pending_since = now
        if len(buffer) >= BATCH_BYTES or now - self.pending_since >= BATCH_S:
            self.flush()

    def flush(self, *, final: bool = False) -> None:
        """Send each stream's pending bytes. A character cut by the end of a read waits for the
        rest, which the next chunk brings; at the end (`final`) the stream has no more to come."""
        for stream, (offset, buffer) in self.pending.items():
            text, length = whole_utf8(buffer, final=final)
            if length:
                self.send({"type": "chunk", "stream": stream, "offset": offset, "data": text, "length": length})
            self.pending[stream] = (offset + length, buffer[length:])
        self.pending_since = 0.0

    def send(self, message: dict[str, Any]) -> None:
        if self.layer is None:
            return
        try:
            async_to_sync(self.layer.group_send)(self.group, {"type": "run.message", "message": message})
        except Exception:  # live output is best effort; the stored log is the truth
            log.warning("could not publish to %s", self.group, exc_info=True)

    def _maybe_heartbeat(self) -> None:
        now = time.monotonic()
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + HEARTBEAT_S
            self.cancel = services.run_heartbeat(run=self.run, samples=self.samples) or self.cancel
            self.next_cancel_poll = now + CANCEL_POLL_S

    def cancelled(self) -> bool:
        now = time.monotonic()
        if not self.cancel and now >= self.next_cancel_poll:
            self.next_cancel_poll = now + CANCEL_POLL_S
            self.cancel = Run.objects.filter(id=self.run.id, cancel_requested=True).exists()
            self._maybe_heartbeat()
        return self.cancel


def whole_utf8(data: bytes | bytearray, *, final: bool = False) -> tuple[str, int]:
    """The text of `data` up to its last whole character, and how many bytes that text takes.

    Only the start of a valid multi-byte character is held back (at most 3 bytes), unless
    `final`; bytes that can never be valid UTF-8 are not waited for but become U+FFFD.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final)
    held, _ = decoder.getstate()
    return text, len(data) - len(held)


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("type", "state")}


@shared_task(acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> str:
    run = services.run_claim(run_id=run_id, worker=socket.gethostname())
    if run is None:
        return "not claimable"
    publisher = RunPublisher(run)
    inputs = [(Path(d.file.path), d.name) for d in run.datasets.all()]
    inputs += [(Path(o.file.path), o.name.rsplit("/", 1)[-1]) for o in run.input_outputs.all()]
    spec = RunSpec(
        runtime=run.runtime,
        script=run.code.encode(),
        limits=Limits(**run.limits),
        inputs=tuple(path for path, _ in inputs),
        input_names=tuple(name for _, name in inputs),
        engine=run.engine_requested,
    )
    with tempfile.TemporaryDirectory(prefix="cordon-export-") as exported:
        # The publisher writes every chunk to the stored log; the supervisor need not keep them.
        result = Supervisor().run(
            spec, on_event=publisher, cancelled=publisher.cancelled, output_dir=Path(exported),
            run_id=run.id.hex[:16], keep_output=False,
        )  # fmt: skip
        final = services.run_finish(run=run, result=result, exported=Path(exported), samples=publisher.samples)
    publisher.send(final_message(final))
    return final.outcome or ""


FINAL_FIELDS = (
    "outcome", "reason", "exit_code", "signal", "wall_s", "cpu_s", "peak_memory_bytes", "stdout_bytes",
    "stderr_bytes", "stdout_truncated", "stderr_truncated", "cleanup_ok",
)  # fmt: skip


def final_message(run: Run) -> dict[str, Any]:
    """The typed `final` message: the outcome and the figures, as stored."""
    return {"type": "final", **{name: getattr(run, name) for name in FINAL_FIELDS}}


@shared_task
def reap_lost_runs() -> int:
    """Finish runs whose worker died (lease expired) as sandbox_error, and sweep this host."""
    from django.utils import timezone

    reaped = 0
    for run in Run.objects.filter(state__in=ACTIVE_STATES[1:], lease_expires_at__lt=timezone.now()):
        reaped += services.run_fail_lost(run=run)
    services.requeue_stale()
    services.reject_unserved()
    try:
        Supervisor().sweep()
    except Exception:  # a sweep problem must not stop the reaper; it is retried next tick
        log.warning("sweep failed", exc_info=True)
    return reaped


@shared_task
def purge_expired_data() -> dict[str, int]:
    return services.purge_expired()
