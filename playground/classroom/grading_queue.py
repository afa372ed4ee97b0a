"""The grading queue: the TestResult rows still pending, handed grading slots by `pump` (at most
CORDON_GRADING_SLOTS grading runs in flight, site-wide), one test run at a time, round-robin per
student of a course; each slot becomes a grading run (a test's, or a check program's)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from playground.classroom.courses import course_engine, effective_limits
from playground.classroom.grading_compare import COMPARE_MAX
from playground.classroom.grading_results import IN_PROGRESS, finish_submission, give_up
from playground.environments import environment_for
from playground.errors import ServiceError
from playground.models import (
    GradingLock,
    Membership,
    Run,
    RunKind,
    Submission,
    SubmissionState,
    TestResult,
    TestStatus,
)
from playground.selectors.runs import grading_in_flight, run_log_read
from playground.services.dispatch import choose_queue
from playground.services.runs import check_egress, queue_run
from runner.spec import Limits

log = logging.getLogger(__name__)


def pump() -> int:
    """Hand out free grading slots: checks of tests already begun first, then the next test of the
    student of a course served longest ago. Returns the grading runs started."""
    started = 0
    with transaction.atomic():
        GradingLock.objects.select_for_update().get_or_create(id=1)
        free = settings.CORDON_GRADING_SLOTS - grading_in_flight()
        if free <= 0:
            return 0
        for result in _checks_due(free):
            started += _start_on_its_own(result, check=True)
        free -= started
        if free <= 0:
            return started
        by_student = _pending_by_student()
        if not by_student:
            return started
        served = _memberships(by_student)
        last = {key: at for key, (_, at) in served.items()}
        while free > 0 and by_student:
            key = _next_turn(by_student, last)
            result_id, _ = by_student[key].pop(0)
            if not by_student[key]:
                del by_student[key]
            now = timezone.now()
            last[key] = now
            if key in served:
                Membership.objects.filter(id=served[key][0]).update(served_at=now)
            result = TestResult.objects.select_related("submission__assignment__course").get(id=result_id)
            started += _start_on_its_own(result)
            free -= 1
    return started


Waiting = dict[tuple[Any, int], list[tuple[int, Any]]]  # (course, student) -> [(result id, submitted at)]
_EPOCH = timezone.now() - timedelta(days=36500)


def _pending_by_student() -> Waiting:
    """The queue, by student of a course, each one's results in the order they are run. Keys only
    (the whole queue can be thousands of results, each with its test's texts)."""
    pending = TestResult.objects.filter(status=TestStatus.PENDING, run=None).order_by(
        "submission__created_at", "position"
    )
    by_student: Waiting = {}
    keys = ("id", "submission__assignment__course_id", "submission__student_id", "submission__created_at")
    for result_id, course_id, student_id, submitted_at in pending.values_list(*keys):
        by_student.setdefault((course_id, student_id), []).append((result_id, submitted_at))
    return by_student


def _memberships(by_student: Waiting) -> dict[tuple[Any, int], tuple[int, Any]]:
    """The waiting students' memberships: (course, student) -> (membership id, last served at)."""
    found = Membership.objects.filter(
        course_id__in={c for c, _ in by_student}, user_id__in={u for _, u in by_student}
    ).values_list("course_id", "user_id", "id", "served_at")
    return {(course, user): (id_, at) for course, user, id_, at in found}


def _next_turn(by_student: Waiting, last: dict[tuple[Any, int], Any]) -> tuple[Any, int]:
    """Whose test runs next: the student whose place comes first. A student's place is when they
    were last served, or (if later) when they submitted the oldest submission still waiting. So
    each student waits behind those served or submitting before them, a student served just now
    goes to the back, and one with fifty submissions is one student in the line, not fifty."""

    def turn(key: tuple[Any, int]) -> tuple[Any, Any, int]:
        waiting = by_student[key][0][1]
        return max(last.get(key) or _EPOCH, waiting), waiting, key[1]

    return min(by_student, key=turn)


def queue_place(submission: Submission) -> dict[str, Any] | None:
    """Where a submission waiting for grading slots stands, from the queue's own state: the test
    runs `pump` will start before its last one, the students served before its first one, and an
    estimate of when it is graded (runs ahead over slots, times a recent grading run's median wall
    time). None once none of its tests waits."""
    mine = _pending_ids(submission)
    if not mine:
        return None
    by_student = _pending_by_student()
    mine &= {r for rs in by_student.values() for r, _ in rs}
    if not mine:
        return None
    last = {key: at for key, (_, at) in _memberships(by_student).items()}
    ahead, students_ahead, seen = 0, set(), False
    clock = timezone.now()
    while mine and by_student:
        key = _next_turn(by_student, last)
        result_id, _ = by_student[key].pop(0)
        if not by_student[key]:
            del by_student[key]
        clock += timedelta(microseconds=1)
        last[key] = clock
        if result_id in mine:
            mine.discard(result_id)
            seen = True
            continue
        ahead += 1
        if not seen and key[1] != submission.student_id:
            students_ahead.add(key)
    slots = max(1, settings.CORDON_GRADING_SLOTS)
    run_s = _grading_run_s()
    total = len(_pending_ids(submission)) + ahead
    return {
        "runs_ahead": ahead, "place": len(students_ahead) + 1,
        "estimate_s": int(math.ceil(total / slots) * run_s + 0.5),
    }  # fmt: skip


def _pending_ids(submission: Submission) -> set[int]:
    return set(submission.results.filter(status=TestStatus.PENDING, run=None).values_list("id", flat=True))


GRADING_RUN_S_DEFAULT = 3.0  # before any grading run has finished


def _grading_run_s() -> float:
    """The median wall time of the last 50 finished grading runs (queue, start and run)."""
    recent = list(
        Run.objects.filter(kind=RunKind.TEST, finished_at__isnull=False, started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("created_at", "finished_at")[:50]
    )
    if not recent:
        return GRADING_RUN_S_DEFAULT
    spans = sorted((done - made).total_seconds() for made, done in recent if done is not None)
    return max(0.5, spans[len(spans) // 2])


def _start_on_its_own(result: TestResult, *, check: bool = False) -> int:
    """Start a result's test (or check) run; one that cannot be started (data that breaks a step) is
    `not_graded` with the reason, in a savepoint, and the queue goes on to the others."""
    try:
        with transaction.atomic():
            return _start_check(result) if check else _start_test(result)
    except Exception as exc:
        log.exception("grading: starting test result %s failed", result.id)
        give_up(result, f"grading this test failed on the server ({type(exc).__name__}); not your code")
        return 0


def _checks_due(limit: int) -> list[TestResult]:
    due = TestResult.objects.filter(status=TestStatus.CHECKING, check_run=None).select_related(
        "submission__assignment__course", "run"
    )
    return list(due.order_by("submission__created_at", "position")[:limit])


def _start_test(result: TestResult) -> int:
    submission, spec = result.submission, result.spec
    assignment = submission.assignment
    run = _grading_run(
        kind=RunKind.TEST, submission=submission, runtime=assignment.runtime, code=submission.code,
        stdin=spec.get("stdin", ""), args=spec.get("args", []), limits=effective_limits(assignment.course,
                                                                                       assignment.limits),
        datasets=list(assignment.datasets.all()), egress=list(assignment.egress or []),
    )  # fmt: skip
    if run is None:
        return 0
    TestResult.objects.filter(id=result.id).update(status=TestStatus.RUNNING, run=run, tries=result.tries + 1)
    Submission.objects.filter(id=submission.id, state=SubmissionState.QUEUED).update(state=SubmissionState.GRADING)
    return 1


def _start_check(result: TestResult) -> int:
    """The check program over the student's results, in a sandbox of its own: /input/stdout,
    /input/stderr, /input/status.json, /input/stdin and the student's files under /input/outputs/."""
    submission, spec, student_run = result.submission, result.spec, result.run
    if student_run is None:  # settled already by another process
        return 0
    folder = f"grading/{result.id}/try-{result.tries}"
    status = {
        "outcome": student_run.outcome, "exit_code": student_run.exit_code, "signal": student_run.signal,
        "wall_s": student_run.wall_s, "stdout_truncated": student_run.stdout_truncated,
        "stderr_truncated": student_run.stderr_truncated, "args": spec.get("args", []),
    }  # fmt: skip
    files = {"status.json": json.dumps(status, indent=1).encode(), "stdin": spec.get("stdin", "").encode()}
    for stream in ("stdout", "stderr"):
        files[stream] = run_log_read(run=student_run, stream=stream, offset=0, limit=COMPARE_MAX * 4)[0]
    staged = []
    for name, data in files.items():
        stored = default_storage.save(f"{folder}/{name}", ContentFile(data))
        staged.append({"name": name, "path": stored, "sha256": hashlib.sha256(data).hexdigest()})
    outputs = list(student_run.outputs.exclude(file=""))
    staged += [{"name": f"outputs/{o.name}", "path": o.file.name, "sha256": o.sha256} for o in outputs]
    course = submission.assignment.course
    base = effective_limits(course, submission.assignment.limits)
    maxima = settings.CORDON_MAXIMA
    limits = Limits.from_json({
        **base.to_json(),
        "input_max_files": min(maxima.input_max_files, len(staged)),
        "input_max_bytes": min(maxima.input_max_bytes, sum(len(d) for d in files.values())
                               + sum(o.size for o in outputs) + 4096),
    })  # fmt: skip
    # No network for the check program: it judges the student's results, which are all staged.
    run = _grading_run(
        kind=RunKind.CHECK, submission=submission, runtime=spec.get("check_runtime") or submission.assignment.runtime,
        code=spec.get("check_code", ""), stdin="", args=[], limits=limits, datasets=[], staged=staged, egress=[],
    )  # fmt: skip
    if run is None:
        return 0
    TestResult.objects.filter(id=result.id).update(check_run=run)
    return 1


def _grading_run(
    *, kind: str, submission: Submission, runtime: str, code: str, stdin: str, args: list[str], limits: Limits,
    datasets: list[Any], egress: list[str], staged: list[dict[str, str]] | None = None,
) -> Run | None:  # fmt: skip
    course = submission.assignment.course
    engine = course_engine(course)
    try:
        queue = choose_queue(engine)
        # The assignment's policy against the ceilings of today (the course's may have been lowered
        # since the assignment was saved): the instructor's to fix, not the student's.
        egress = check_egress(egress, course=course)
    except ServiceError as exc:  # no live host serves what the course requires, or the policy is refused
        _fail_infrastructure_now(submission, str(exc.message))
        return None
    run = Run(
        owner=submission.student, kind=kind, course=course, runtime=runtime, code=code, stdin=stdin, args=args,
        environment=environment_for(submission.assignment.environment, runtime),
        staged_files=staged or [], limits=limits.to_json(), engine_requested=engine, queue=queue, egress=egress,
    )  # fmt: skip
    return queue_run(run, datasets=datasets, detail={"grading": kind, "submission": str(submission.id)})


def _fail_infrastructure_now(submission: Submission, why: str) -> None:
    TestResult.objects.filter(submission=submission, status__in=IN_PROGRESS).update(
        status=TestStatus.NOT_GRADED, detail=why[:500], finished_at=timezone.now()
    )
    finish_submission(submission.id)
