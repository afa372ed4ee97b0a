"""Sending runs to their engine's queue: which queue (an engine some live worker host serves),
the send itself once the row is committed, sending again while the broker is down, and the
reaper's re-send of runs still queued long after they were sent."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from celery import current_app
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from playground.errors import ServiceError
from playground.models import Run, RunState
from playground.selectors.hosts import live_engines
from runner.registry import auto_choice

log = logging.getLogger(__name__)
# The task a run's message names; sent by name, so that this module (which the tasks use) does not
# import them, nor the Celery app (the current app: playground/celery.py, made as Django starts).
EXECUTE_RUN = "playground.tasks.execute_run"
# The task's hard time limit is the run's own deadline plus this, for boot and teardown.
TASK_TIME_MARGIN_S = 180
# Grading runs (a submission's tests, check programs) go to their engine's grading queue, which
# `make run` gives a worker of its own (playground/celery.py). A worker that consumes both
# (CORDON_WORKER_QUEUES=all, one worker doing everything) takes the queued task of highest priority
# first (in Redis, 0 is the highest): a person's run goes before grading work, so a course's grading
# delays it by the remaining time of the tasks already running, never by the queue.
PERSON_PRIORITY = 0
GRADING_PRIORITY = 9


GRADING_SUFFIX = "-grading"


def grading_queue(engine_queue: str) -> str:
    """Where a grading run of this engine is sent: its own queue, which `make run`'s grading worker
    consumes (playground/celery.py), so that grading never holds a pool process a person's run needs."""
    return engine_queue + GRADING_SUFFIX


def _sending(run: Run, time_limit: int) -> _Sending:
    if run.is_grading:
        return _Sending(grading_queue(run.queue), time_limit, GRADING_PRIORITY)
    return _Sending(run.queue, time_limit, PERSON_PRIORITY)


def choose_queue(engine: str) -> str:
    """The queue of an engine some live worker serves: auto prefers microVMs where a host has them.
    An engine asked for by name that no live host serves is refused here, not queued for ever."""
    live = live_engines()
    if engine == "auto":
        return auto_choice(live)
    if engine not in live:
        serving = ", ".join(sorted(live)) or "none"
        raise ServiceError(
            "engine_unavailable", f"no live worker host serves the {engine} engine (served now: {serving}); "
            "submit with engine 'auto' or ask the operator", field="engine", status=503,
        )  # fmt: skip
    return engine


def task_time_limit_s(run: Run) -> int:
    """The hard time limit of the run's task: past it Celery kills the process running it."""
    return int(run.decoded_limits.wall_timeout_s + TASK_TIME_MARGIN_S)


def enqueue(*, run: Run) -> None:
    """Send the run to its engine's queue once the row is committed. If the broker is down, this
    process sends it again every second until the broker takes it (and the reaper re-sends runs
    still queued long after, should this process die); a duplicate is harmless (claims are atomic)."""
    run_id, sending = str(run.id), _sending(run, task_time_limit_s(run))

    def send() -> None:
        Run.objects.filter(id=run_id).update(enqueued_at=timezone.now())
        if not _send(run_id, sending):
            _unsent.add(run_id, sending)

    transaction.on_commit(send)


def resend(*, run_id: str) -> bool:
    """Send a still-queued run's task again (a draining host hands back one it had reserved)."""
    run = Run.objects.filter(id=run_id, state=RunState.QUEUED, cancel_requested=False).first()
    if run is None:
        return False
    enqueue(run=run)  # outside a transaction, sent at once
    return True


def stop_consuming(*, nodename: str | None, queue: str | None) -> None:
    """Ask the worker `nodename` to stop consuming `queue` (its host is draining); no reply awaited."""
    if nodename and queue:
        try:
            current_app.control.cancel_consumer(queue, destination=[nodename])
        except Exception:  # the host loop does the same on its next round
            log.warning("could not ask %s to stop consuming %s", nodename, queue, exc_info=True)


def requeue_stale(*, older_than_s: float = 60.0) -> int:
    """Send again the runs still queued long after they were sent (a lost message or broker), and
    those never sent long after they were made: the process that made one died between its commit
    and its send (every run is sent on commit: queue_run)."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    unsent = Q(enqueued_at__isnull=True, created_at__lt=cutoff)
    queued = Run.objects.filter(state=RunState.QUEUED, cancel_requested=False)
    stale = list(queued.filter(Q(enqueued_at__lt=cutoff) | unsent))
    for run in stale:
        enqueue(run=run)
    return len(stale)


@dataclass(frozen=True)
class _Sending:
    """Where and how a run's task is sent."""

    queue: str
    time_limit: int
    priority: int


def _send(run_id: str, sending: _Sending) -> bool:
    try:
        current_app.send_task(
            EXECUTE_RUN, args=(run_id,), queue=sending.queue, time_limit=sending.time_limit,
            priority=sending.priority, retry=False,
        )  # fmt: skip
    except Exception:  # the broker is unreachable: sent again once it is back
        log.warning("could not enqueue run %s; sending it again when the broker is back", run_id, exc_info=True)
        return False
    return True


class _Unsent:
    """Runs whose task the broker refused, sent again from this process every RESEND_S until it
    takes them, so a run submitted while Redis is down starts as soon as Redis is back."""

    RESEND_S = 1.0

    def __init__(self) -> None:
        self._pending: dict[str, _Sending] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, run_id: str, sending: _Sending) -> None:
        with self._lock:
            self._pending[run_id] = sending
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cordon-resend", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        from django.db import close_old_connections

        while True:
            time.sleep(self.RESEND_S)
            with self._lock:
                if not self._pending:
                    # Decided under the lock that `add` takes: a run added now starts a new thread.
                    self._thread = None
                    return
                pending = dict(self._pending)
            ids = Run.objects.filter(id__in=list(pending), state=RunState.QUEUED).values_list("id", flat=True)
            queued = {str(i) for i in ids}
            for run_id, sending in pending.items():
                if run_id not in queued or _send(run_id, sending):
                    with self._lock:
                        self._pending.pop(run_id, None)
            close_old_connections()


_unsent = _Unsent()
