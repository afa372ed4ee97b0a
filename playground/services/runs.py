"""Runs on the web's side: submission (checked against the limits, the egress ceilings, the quotas
and the engines live hosts serve), the user's cancel and rerun, the retry of a sandbox error, and the reaper's
decisions (lost workers, runs no live host serves). Every state change is a conditional update
plus a RunEvent row; the worker's side of a run is services/execution.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from playground.dbclock import db_now
from playground.egress import egress_problem, normalised
from playground.environments import check_environment
from playground.errors import ServiceError
from playground.limits import over_maximum
from playground.logs import log_release, log_store
from playground.models import (
    ACTIVE_STATES,
    WORKER_STATES,
    Course,
    Dataset,
    Membership,
    Run,
    RunEvent,
    RunOutputFile,
    RunState,
)
from playground.observe import run_event
from playground.selectors.datasets import current_versions
from playground.selectors.hosts import live_engines
from playground.services.dispatch import choose_queue, enqueue, requeue_stale
from playground.services.receipts import receipt_issue
from runner.registry import REQUESTABLE
from runner.spec import RUNTIMES, Limits, Outcome, stdin_and_args_problem
from runner.units import size_words

MAX_CODE_BYTES = 256 * 1024


def run_create(
    *,
    user: User,
    runtime: str,
    code: str,
    dataset_ids: list[Any],
    output_ids: list[int] | None = None,
    limits: Limits | None = None,
    engine: str = "auto",
    course: Course | None = None,
    datasets: list[Dataset] | None = None,
    stdin: str = "",
    args: list[str] | None = None,
    egress: Sequence[str] = (),
    environment: str = "",
) -> Run:
    """A user's own run. With `course` (an assignment's Run button) it is a course run: the
    course's datasets given as `datasets`, its runtimes, and its quotas besides the site's. With
    `egress` it may reach those destinations, within the site's egress ceiling (and the course's)."""
    if runtime not in RUNTIMES:
        raise ServiceError(
            "unknown_runtime", f"runtime must be one of {', '.join(RUNTIMES)}", field="runtime", status=422
        )
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ServiceError("code_too_large", f"code is over {size_words(MAX_CODE_BYTES)}", field="code", status=422)
    if engine not in REQUESTABLE:
        allowed = f"{', '.join(REQUESTABLE[:-1])} or {REQUESTABLE[-1]}"
        raise ServiceError("unknown_engine", f"engine must be {allowed}", field="engine", status=422)
    environment = check_environment(environment, runtime)
    limits = limits or Limits()
    check_limits(limits=limits)
    if course is not None and not Membership.objects.filter(course=course, user=user).exists():
        raise ServiceError("not_a_member", "you are no longer a member of this run's course", status=404)
    if course is not None and runtime not in (course.allowed_runtimes or RUNTIMES):
        allowed = ", ".join(course.allowed_runtimes)
        raise ServiceError("runtime_not_allowed", f"this course allows {allowed}", field="runtime", status=422)
    check_program_input(stdin, args or [])
    policy = check_egress(egress, course=course)
    found = current_versions(Dataset.objects.filter(owner=user, course=None, id__in=dataset_ids))
    own = list({d.id: d for d in found.values()}.values())  # a replaced one: its replacement
    if len(found) != len(set(map(str, dataset_ids))):
        raise ServiceError(
            "dataset_not_found", "a dataset in dataset_ids does not exist", field="dataset_ids", status=404
        )
    outputs = list(
        RunOutputFile.objects.filter(run__in=Run.objects.own(user), id__in=output_ids or []).exclude(file="")
    )
    if len(outputs) != len(set(output_ids or [])):
        raise ServiceError("output_not_found", "an output in output_ids does not exist", field="output_ids", status=404)
    datasets = own + list(datasets or [])
    names = [d.name for d in datasets] + [o.name.rsplit("/", 1)[-1] for o in outputs]
    if len(names) != len(set(names)):
        raise ServiceError("duplicate_input_name", "two inputs have the same name", field="dataset_ids", status=422)
    queue = choose_queue(engine)
    with transaction.atomic():
        # One submission of a user at a time, so the quota check and the insert cannot race:
        # a row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises.
        User.objects.select_for_update().get(pk=user.pk)
        _check_run_quotas(user)
        if course is not None:
            _check_course_quotas(user, course)
        return queue_run(
            Run(owner=user, runtime=runtime, environment=environment, code=code, limits=limits.to_json(),
                engine_requested=engine, queue=queue,
                course=course, stdin=stdin, args=list(args or []), egress=policy),
            datasets=datasets, outputs=outputs,
        )  # fmt: skip


def queue_run(
    run: Run,
    *,
    datasets: Sequence[Dataset] = (),
    outputs: Sequence[RunOutputFile] = (),
    detail: dict[str, Any] | None = None,
) -> Run:
    """The one way a Run row comes to be (a user's run, its retry, a grading run): saved with its
    inputs, its `queued` event recorded, and sent to its queue once the transaction commits. Every
    check is the caller's, done before."""
    run.save(force_insert=True)
    run.datasets.set(datasets)
    run.input_outputs.set(outputs)
    record_event(run=run, state=RunState.QUEUED, detail=detail)
    enqueue(run=run)
    return run


def check_limits(*, limits: Limits) -> None:
    """Every run's limits, new, rerun or retried, against the operator's maxima of today."""
    for field, code, message in over_maximum(limits):
        raise ServiceError(code, message, field=field, status=422)


def check_egress(egress: Sequence[str], *, course: Course | None = None, field: str = "egress") -> list[str]:
    """A run's egress policy (or an assignment's) against the ceilings of today: the site's and,
    for a course's run, the course's. Returns it as stored."""
    problem = egress_problem(egress, course=course)
    if problem is not None:
        code, message = problem
        raise ServiceError(code, message, field=field, status=422)
    return normalised(egress)


def _check_run_quotas(user: User) -> None:
    active = Run.objects.own(user).filter(state__in=ACTIVE_STATES).count()  # grading runs have their queue
    if active >= settings.CORDON_QUOTA_CONCURRENT_RUNS:
        raise ServiceError(
            "quota_exceeded", f"{active} runs are active; at most {settings.CORDON_QUOTA_CONCURRENT_RUNS} at once",
            status=429,
        )  # fmt: skip
    hour = Run.objects.own(user).filter(created_at__gte=timezone.now() - timedelta(hours=1), retry_of=None).count()
    if hour >= settings.CORDON_QUOTA_RUNS_PER_HOUR:
        raise ServiceError(
            "quota_exceeded", f"{hour} runs in the last hour; at most {settings.CORDON_QUOTA_RUNS_PER_HOUR}", status=429
        )


def _check_course_quotas(user: User, course: Course) -> None:
    """A course's own quotas on its students' Run button (grading has its own queue)."""
    runs = Run.objects.own(user).filter(course=course)
    active = runs.filter(state__in=ACTIVE_STATES).count()
    if active >= course.quota_concurrent_runs:
        raise ServiceError(
            "quota_exceeded", f"{active} runs of this course are active; the course allows "
            f"{course.quota_concurrent_runs} at once", status=429,
        )  # fmt: skip
    hour = runs.filter(created_at__gte=timezone.now() - timedelta(hours=1), retry_of=None).count()
    if hour >= course.quota_runs_per_hour:
        raise ServiceError(
            "quota_exceeded", f"{hour} runs of this course in the last hour; it allows {course.quota_runs_per_hour}",
            status=429,
        )  # fmt: skip


def check_program_input(stdin: str, args: list[str], *, where: str = "", code: str | None = None) -> None:
    """A program's stdin and args (a run's, or an assignment test's: `where` "tests.1.") by the
    supervisor's own check (runner.spec), refused here as an API error rather than later as the
    run's rejected_input; and no NUL in stdin, which a database text cannot hold."""
    try:
        data = stdin.encode()
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape
        data = b"\xff"  # what the check below calls not UTF-8
    problem = ("stdin_invalid", "stdin contains a NUL character") if "\0" in stdin else None
    problem = problem or stdin_and_args_problem(data, tuple(args))
    if problem is not None:
        name, message = problem
        part = "stdin" if name.startswith("stdin") else "args"
        field = f"{where}{part}"
        raise ServiceError(code or f"invalid_{part}", f"{field}: {message}", field=field, status=422)


def run_cancel(*, run: Run, by: User) -> Run:
    """Queued runs end at once; a claimed or running one is stopped by its worker within a poll
    (one waiting for admission stops waiting). An event is recorded only for a change: cancelling
    a finished run, or one already asked to stop, records nothing."""
    with transaction.atomic():  # its end, its event and its receipt, seen together or not at all
        finished = Run.objects.filter(id=run.id, state=RunState.QUEUED).update(
            state=RunState.FINISHED, outcome=Outcome.CANCELLED.value, charged=False, cancel_requested=True,
            reason="cancelled before it started", finished_at=timezone.now(),
        )  # fmt: skip
        if finished:
            record_event(run=run, state=RunState.FINISHED, detail={"outcome": "cancelled", "by": by.get_username()})
            receipt_issue(run_id=run.id)
    asked = not finished and Run.objects.filter(id=run.id, state__in=ACTIVE_STATES, cancel_requested=False).update(
        cancel_requested=True
    )
    if asked:
        record_event(run=run, state="cancel_requested", detail={"by": by.get_username()})
    run.refresh_from_db()
    return run


def run_rerun(*, run: Run, by: User) -> Run:
    if run.is_grading:  # as its owner's run it would show them a hidden test's stdin
        raise ServiceError("not_rerunnable", "a grading run is run again by a regrade, not rerun", status=422)
    datasets = list(run.datasets.all())
    new = run_create(
        user=run.owner, runtime=run.runtime, code=run.code, dataset_ids=[d.id for d in datasets if d.course is None],
        output_ids=[o.id for o in run.input_outputs.all()], limits=run.decoded_limits,
        engine=run.engine_requested, course=run.course, datasets=[d for d in datasets if d.course is not None],
        stdin=run.stdin, args=run.args, egress=run.egress, environment=run.environment,
    )  # fmt: skip
    Run.objects.filter(id=new.id).update(rerun_of=run)
    new.refresh_from_db()
    return new


def retry_once(*, run: Run) -> Run | None:
    """A sandbox error is not the user's: run it once more, as a new, linked run."""
    if run.retry_count >= 1 or run.cancel_requested or run.is_grading:
        return None  # a grading run is tried again by the grading queue (classroom/grading.py)
    try:  # the same checks as a new run's: the maxima or a ceiling may have been lowered since
        check_limits(limits=run.decoded_limits)
        check_egress(run.egress, course=run.course)
    except ServiceError as exc:
        record_event(run=run, state="retry_refused", detail={"reason": exc.message})
        return None
    retry = Run(
        owner=run.owner, runtime=run.runtime, code=run.code, limits=run.limits, engine_requested=run.engine_requested,
        queue=run.queue, retry_of=run, retry_count=run.retry_count + 1, course=run.course, stdin=run.stdin,
        args=run.args, egress=run.egress, environment=run.environment,
    )  # fmt: skip
    return queue_run(
        retry,
        datasets=list(run.datasets.all()),
        outputs=list(run.input_outputs.all()),
        detail={"retry_of": str(run.id)},
    )


# --- the reaper ----------------------------------------------------------------------------


def reap() -> int:
    """The periodic reaper: finish the runs whose worker died, send again the runs still queued
    long after they were sent, and reject those no live host serves. Returns the runs reaped."""
    reaped = 0
    for run in Run.objects.filter(state__in=WORKER_STATES, lease_expires_at__lt=db_now()):
        reaped += run_fail_lost(run=run)
    requeue_stale()
    reject_unserved()
    return reaped


def run_fail_lost(*, run: Run) -> bool:
    """Finish a run whose worker stopped renewing its lease (claimed, waiting for admission, or
    further on): sandbox_error, not charged, retried once. Its log is stored from what reached Redis
    (or this host's spool, if it ran here), before the end is written, for readers who see it."""
    log_store(run_id=run.id)
    now = timezone.now()
    with transaction.atomic():  # its end, its event and its retry, seen together or not at all
        lost = Run.objects.filter(id=run.id, state__in=WORKER_STATES, lease_expires_at__lt=db_now()).update(
            state=RunState.FINISHED, outcome=Outcome.SANDBOX_ERROR.value, charged=False, error_code="lost_worker",
            error_message=f"the worker on {run.worker_host or 'an unknown host'} stopped renewing its lease",
            reason="lost_worker: the worker running it died", finished_at=now, lease_expires_at=None,
        )  # fmt: skip
        if lost:
            record_event(run=run, state=RunState.FINISHED, detail={"outcome": "sandbox_error", "error": "lost_worker"})
            run.refresh_from_db()
            retry_once(run=run)
            receipt_issue(run_id=run.id)
    if lost:
        log_release(run_id=run.id)
    return bool(lost)


def reject_unserved(*, older_than_s: float | None = None) -> int:
    """Finish as rejected_capacity the runs queued longer than the wait bound on a queue that no
    live worker host serves: nothing ran, nothing is charged, the quota slot is free again."""
    wait_s = settings.CORDON_QUEUE_WAIT_S if older_than_s is None else older_than_s
    live = live_engines()
    cutoff = timezone.now() - timedelta(seconds=wait_s)
    waiting = Run.objects.filter(state=RunState.QUEUED, created_at__lt=cutoff).exclude(queue__in=live)
    rejected = 0
    for run in waiting:
        reason = f"no live worker host served the {run.queue} engine within {wait_s:g} s"
        with transaction.atomic():  # its end, its event and its receipt, seen together or not at all
            finished = Run.objects.filter(id=run.id, state=RunState.QUEUED).update(
                state=RunState.FINISHED, outcome=Outcome.REJECTED_CAPACITY.value, charged=False, reason=reason,
                error_code="engine_unavailable", error_message=reason, finished_at=timezone.now(),
            )  # fmt: skip
            if finished:
                detail = {"outcome": Outcome.REJECTED_CAPACITY.value, "reason": reason}
                record_event(run=run, state=RunState.FINISHED, detail=detail)
                receipt_issue(run_id=run.id)
                rejected += 1
    return rejected


def record_event(*, run: Run, state: str, detail: dict[str, Any] | None = None, at: datetime | None = None) -> RunEvent:
    """The audit row of a state change (or of a request about the run, e.g. cancel_requested),
    and its log line (playground.observe). `at`: when it happened, if that was before now."""
    row = RunEvent.objects.create(run=run, state=state, detail=detail or {}, at=at or timezone.now())
    run_event(run, state, row.detail)
    return row
