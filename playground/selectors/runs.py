"""A user's runs, their stored logs (read from a byte offset) and their output files; staff may read
any user's (the callers record such reads with services/audit.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from playground.live import whole_utf8
from playground.logs import log_read
from playground.models import (
    ACTIVE_STATES,
    STAFF_ROLES,
    Membership,
    Run,
    RunKind,
    RunOutputFile,
    RunState,
    StaffAccess,
    TestResult,
    TestStatus,
)

# A run's columns that no list of runs shows (one run's record does): lists leave them unread.
LIST_DEFERRED = ("code", "stdin", "args", "samples", "egress_record", "staged_files")


def run_list_for_user(
    *, user: User, state: str | None = None, outcome: str | None = None, runtime: str | None = None
) -> QuerySet[Run]:
    """The user's runs as the API lists them: with their outputs and their retries' ids."""
    retries = Prefetch("retries", queryset=Run.objects.only("id", "retry_of"))
    runs = Run.objects.own(user).defer(*LIST_DEFERRED).prefetch_related("outputs", retries)
    if state:
        runs = runs.filter(state=state)
    if outcome:
        runs = runs.filter(outcome=outcome)
    if runtime:
        runs = runs.filter(runtime=runtime)
    return runs


def run_history_for_user(*, user: User, limit: int = 200) -> QuerySet[Run]:
    """The user's latest runs with what the Runs page shows of them."""
    shown = ("created_at", "runtime", "state", "outcome", "reason", "wall_s", "engine", "isolation")
    return Run.objects.own(user).only("id", *shown)[:limit]


def run_get_for_user(*, user: User, run_id: Any) -> Run:
    run = Run.objects.own(user).filter(id=run_id).prefetch_related("outputs", "events", "cleanup_checks").first()
    if run is None:
        raise Http404("no such run")
    return run


def can_read_any_run(user: Any) -> bool:
    """Staff who may view runs in the audit console (the playground.view_run permission; every
    superuser) may read any user's run outside it too, each read recorded; other staff may not."""
    return bool(user.is_active and user.is_staff and user.has_perm("playground.view_run"))


def runs_readable_by(user: Any) -> QuerySet[Run]:
    """Every run `user` may read: staff who may view runs, any; others their own (never a grading
    run) and, as a course's instructor or assistant, every run of that course (grading runs too)."""
    if can_read_any_run(user):
        return Run.objects.all()
    staff_of = Membership.objects.filter(user=user, role__in=STAFF_ROLES).values("course_id")
    return Run.objects.filter(Q(owner=user, kind=RunKind.RUN) | Q(course__in=staff_of))


def run_get_for_viewer(*, user: User, run_id: Any) -> Run:
    """The run, for its owner, a course's staff (its runs) or staff who may view runs (any run);
    404 for anyone else, as if it did not exist."""
    runs = runs_readable_by(user).filter(id=run_id).select_related("owner")
    run = runs.prefetch_related("outputs", "events", "cleanup_checks").first()
    if run is None:
        raise Http404("no such run")
    return run


def run_state_for_viewer(*, user: User, run_id: Any) -> str:
    """The run's state alone (one small read), for whoever may read the run; 404 for anyone else."""
    state = runs_readable_by(user).filter(id=run_id).values_list("state", flat=True).first()
    if state is None:
        raise Http404("no such run")
    return state


def output_get_for_viewer(*, user: User, run_id: Any, name: str) -> RunOutputFile:
    """A stored output file, for whoever may read its run (runs_readable_by); 404 for anyone else."""
    outputs = RunOutputFile.objects.filter(run__in=runs_readable_by(user))
    output = outputs.filter(run_id=run_id, name=name).exclude(file="").select_related("run__owner").first()
    if output is None:
        raise Http404("no such output")
    return output


def staff_access_recorded_since(
    *, viewer: Any, what: str, within: timedelta, run: Run | None = None, detail: str | None = None
) -> bool:
    """Whether `viewer`'s read of `what` (of this run, or with this detail, e.g. a submission's id)
    was already recorded within `within`."""
    reads = StaffAccess.objects.filter(staff_id=viewer.pk, what=what, at__gte=timezone.now() - within)
    if run is not None:
        reads = reads.filter(run=run)
    if detail is not None:
        reads = reads.filter(detail=detail)
    return reads.exists()


def run_log_read(*, run: Run, stream: str, offset: int, limit: int) -> tuple[bytes, int, bool]:
    """(bytes from `offset`, the next offset, whether the log is complete). Cut after a whole
    character unless at the end, so a client never sees half a character between two reads."""
    complete = run.state not in ACTIVE_STATES  # read before the log: what a finished run wrote is all
    data, size = log_read(run_id=run.id, stream=stream, offset=offset, limit=limit, finished=complete)
    if offset + len(data) < size or not complete:
        data = data[: whole_utf8(data)[1]]
    return data, offset + len(data), complete and offset + len(data) >= size


_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


def run_log_replay_span(*, run: Run, stream: str, offset: int, tail: int) -> tuple[int, int]:
    """Where a replay of a log from `offset` that sends no more than its last `tail` bytes starts
    (at `offset`, or at the first whole character of the tail) and ends (the log's size now)."""
    finished = run.state not in ACTIVE_STATES
    _, size = log_read(run_id=run.id, stream=stream, offset=0, limit=1, finished=finished)
    start = max(offset, size - tail)
    if start > offset:  # the rest of a character the tail cuts is not sent
        head, _ = log_read(run_id=run.id, stream=stream, offset=start, limit=3, finished=finished)
        start += len(head) - len(head.lstrip(_UTF8_CONTINUATION))
    return start, size


def run_egress_view(*, run: Run) -> dict[str, Any] | None:
    """A run's egress as its pages show it: the policy asked, whether the run has ended, and its
    proxy's record (each attempt with its time as a datetime and its destination as host:port);
    None for a run that had no network."""
    record = run.egress_record
    if not run.egress and record is None:
        return None
    shown = None
    if record is not None:
        attempts = [
            {**attempt, "at": datetime.fromtimestamp(attempt["at"], tz=UTC),
             "destination": _destination(attempt["host"], attempt["port"])}
            for attempt in record.get("attempts") or []
        ]  # fmt: skip
        shown = {**record, "attempts": attempts}
    return {"policy": run.egress or (record or {}).get("policy", []), "ended": run.state == RunState.FINISHED,
            "record": shown}  # fmt: skip


def _destination(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def grading_in_flight() -> int:
    """The grading runs holding a slot: every one not finished (what the queue's pump keeps within
    CORDON_GRADING_SLOTS)."""
    return Run.objects.filter(kind__in=(RunKind.TEST, RunKind.CHECK), state__in=ACTIVE_STATES).count()


def grading_waiting() -> int:
    """The grading runs waiting for a slot: tests not started, and checks of tests that ran."""
    tests = TestResult.objects.filter(status=TestStatus.PENDING, run=None).count()
    return tests + TestResult.objects.filter(status=TestStatus.CHECKING, check_run=None).count()
