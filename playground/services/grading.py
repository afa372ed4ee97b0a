"""Grading: a submission's tests, each its own supervised run of the student's code, and the
instructor's check programs, each in a sandbox of its own over the student's results.

The grading queue is the TestResult rows still pending. `pump` hands out grading slots (at most
CORDON_GRADING_SLOTS grading runs in flight, site-wide), one test run at a time, round-robin per
student of a course: the next slot goes to the student whose turn came first (served longest
ago, or submitted since), so one student's fifty submissions wait behind everyone else's, not in
front, and a student already being graded goes on before students who submitted after they were
last served. `settle` turns finished grading runs into results, each result on its own (one that
cannot be settled is not_graded with the reason; the others go on); a grading run's own task
settles its result, the grading worker's GradingLoop what such a task left. An output is compared
with its expectation here only when sizes known first bound the work small (matching.py);
otherwise in a bounded child (runner.bounded). Submissions are rate-limited per student and per
assignment.

Only the student's code, stdin and args enter the student's sandbox; expectations and check
programs never do. A test's run has the assignment's egress policy; a check run has no network.
A grading run that ends in an infrastructure outcome (sandbox_error, rejected_capacity,
cancelled) is run again, up to MAX_TRIES; a submission whose grading still failed is
`not_graded` and not charged as an attempt, and its student is told so."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from playground import matching, throttle
from playground.models import (
    ACTIVE_STATES,
    Assignment,
    AssignmentTest,
    GradingLock,
    Match,
    Membership,
    Run,
    RunKind,
    RunState,
    Submission,
    SubmissionState,
    TestResult,
    TestStatus,
)
from playground.selectors.courses import assignment_is_open, assignment_past_due
from playground.selectors.runs import run_log_read
from playground.services.courses import effective_limits
from playground.services.dispatch import choose_queue, enqueue
from playground.services.errors import ServiceError
from playground.services.runs import MAX_CODE_BYTES, check_egress, record_event
from playground.storage import delete_with_folders
from runner import bounded
from runner.spec import Limits, Outcome
from runner.units import size_words

log = logging.getLogger(__name__)
MAX_TRIES = 3  # grading runs of one test (or check) that ended in an infrastructure outcome
SETTLE_BUDGET_S = 30.0  # a settling round begins no result past this (the next round goes on)
INFRASTRUCTURE = {Outcome.SANDBOX_ERROR.value, Outcome.REJECTED_CAPACITY.value, Outcome.CANCELLED.value}
FINAL = {TestStatus.PASSED, TestStatus.FAILED, TestStatus.NOT_GRADED}
IN_PROGRESS = (TestStatus.PENDING, TestStatus.RUNNING, TestStatus.CHECKING)
FEEDBACK_MAX = 8 * 1024
COMPARE_MAX = 1 << 20  # the stdout compared with an expectation (the run's own cap is usually this)
COMPARE_JOB = "playground.matching:compare_job"

# What a person reads for a test result. A test's status and a run's outcome are two vocabularies
# that share a word ("failed": the output was wrong; the program exited non-zero), so each has its
# own table, keyed by its own type, and result_words reads the result's outcome to tell them apart.
STATUS_WORDS: dict[TestStatus, str] = {
    TestStatus.PENDING: "waiting to run",
    TestStatus.RUNNING: "running",
    TestStatus.CHECKING: "being checked",
    TestStatus.PASSED: "passed",
    TestStatus.NOT_GRADED: "not graded: the grader failed (not your code); this does not count as an attempt",
}
WRONG_OUTPUT = "failed: the output was not what was expected"
CHECK_REFUSED = "failed: the check program did not accept the output"
HIDDEN_FAILED = "failed (a hidden test: how it failed is not shown)"
OUTCOME_WORDS: dict[Outcome, str] = {
    Outcome.FAILED: "failed: the program exited with an error",
    Outcome.TIMED_OUT: "failed: the program ran out of time",
    Outcome.CPU_LIMIT: "failed: the program used up its CPU time",
    Outcome.MEMORY_LIMIT: "failed: the program ran out of memory",
    Outcome.OUTPUT_LIMIT: "failed: the program wrote more output than allowed",
    Outcome.DISK_LIMIT: "failed: the program filled its disk",
    Outcome.PROCESS_LIMIT: "failed: the program started too many processes",
    Outcome.EGRESS_LIMIT: "failed: the program sent, received or connected more over the network than allowed",
}


def result_words(
    status: str, *, outcome: str | None = None, exit_code: int | None = None, checked: bool = False
) -> str:
    """A result's status in plain words. `status` "failed" is a wrong output when the program
    itself succeeded (`outcome`), refused by the check program when the test has one (`checked`),
    and a non-zero exit (with its status) when the program failed; any other status that is a
    run's outcome (timed_out, memory_limit, ...) is how the program ended."""
    if status in STATUS_WORDS:
        return STATUS_WORDS[TestStatus(status)]
    if status == TestStatus.FAILED and outcome in (None, "", Outcome.SUCCEEDED):
        return CHECK_REFUSED if checked else WRONG_OUTPUT
    try:
        ended = Outcome(status)
    except ValueError:
        return status.replace("_", " ")
    words = OUTCOME_WORDS.get(ended, f"failed: {ended.value.replace('_', ' ')}")
    if ended == Outcome.FAILED and exit_code is not None:
        words += f" (exit status {exit_code})"
    return words


def words_for(result: TestResult) -> str:
    return result_words(result.status, outcome=result.outcome, exit_code=result.exit_code,
                        checked=bool(result.spec.get("check_code")))  # fmt: skip


# --- submitting ---------------------------------------------------------------------------


def attempts_used(*, assignment: Assignment, student: User) -> int:
    """Submissions that count: graded (charged) ones and those still being graded."""
    mine = Submission.objects.filter(assignment=assignment, student=student)
    return mine.exclude(charged=False).count()  # Submission.counted, in the database


def submission_create(*, user: User, assignment: Assignment, code: str) -> Submission:
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ServiceError("code_too_large", f"code is over {size_words(MAX_CODE_BYTES)}", field="code", status=422)
    if not assignment_is_open(assignment):
        raise ServiceError("not_open", "this assignment is not open yet", status=422)
    late = assignment_past_due(assignment)
    if late and not assignment.accept_late:
        raise ServiceError("past_due", "the due time has passed and late submissions are not accepted", status=422)
    _check_rate(user, assignment)
    tests = list(assignment.tests.all())
    with transaction.atomic():
        # One submission of a student at a time, so the attempt count and the insert cannot race.
        User.objects.select_for_update().get(pk=user.pk)
        used = attempts_used(assignment=assignment, student=user)
        if assignment.attempts_allowed and used >= assignment.attempts_allowed:
            raise ServiceError("no_attempts_left", f"all {assignment.attempts_allowed} attempts are used", status=422)
        submission = Submission.objects.create(
            assignment=assignment, student=user, code=code, late=late, tests_version=assignment.tests_version,
            max_score=sum(t.points for t in tests),
        )  # fmt: skip
        _add_results(submission, tests)
        transaction.on_commit(pump)
    return submission


def _check_rate(user: User, assignment: Assignment) -> None:
    """At most CORDON_SUBMISSIONS_PER_MINUTE_STUDENT a minute by one student to one assignment, and
    CORDON_SUBMISSIONS_PER_MINUTE_ASSIGNMENT by all its students (each a grading run per test)."""
    limits = (
        (f"submit:{assignment.id}:{user.pk}", settings.CORDON_SUBMISSIONS_PER_MINUTE_STUDENT, "by one student"),
        (f"submit:{assignment.id}", settings.CORDON_SUBMISSIONS_PER_MINUTE_ASSIGNMENT, "by all its students"),
    )
    for key, limit, whose in limits:
        wait_s = throttle.rate_wait_s(key, limit)
        if wait_s is not None:
            raise ServiceError(
                "too_many_submissions", f"at most {limit} submissions a minute {whose} to this assignment; try again "
                f"in {wait_s} seconds", status=429, retry_after_s=wait_s,
            )  # fmt: skip


def _add_results(submission: Submission, tests: list[AssignmentTest]) -> None:
    TestResult.objects.bulk_create(
        [
            TestResult(
                submission=submission,
                test=test,
                position=index,
                name=test.name,
                points=test.points,
                visibility=test.visibility,
                spec=_spec(test, submission.assignment),
            )
            for index, test in enumerate(tests)
        ]
    )
    if not tests:  # nothing to run: graded at once, with 0 of 0
        _finish_submission(submission.id)


def _spec(test: AssignmentTest, assignment: Assignment) -> dict[str, Any]:
    return {
        "stdin": test.stdin, "args": list(test.args or []), "expected_stdout": test.expected_stdout,
        "match": test.match, "check_code": test.check_code, "check_runtime": test.check_runtime or assignment.runtime,
    }  # fmt: skip


def regrade(*, assignment: Assignment) -> int:
    """Grade every student's latest graded submission again with the current tests (after the
    instructor changed them). The attempt stays charged as it was; the score is replaced."""
    tests = list(assignment.tests.all())
    latest: dict[int, Submission] = {}
    graded = assignment.submissions.filter(state=SubmissionState.GRADED).order_by("created_at")
    for submission in graded:
        latest[submission.student_id] = submission
    with transaction.atomic():
        for submission in latest.values():
            submission.results.all().delete()
            Submission.objects.filter(id=submission.id).update(
                state=SubmissionState.QUEUED, score=None, max_score=sum(t.points for t in tests), graded_at=None,
                tests_version=assignment.tests_version, regraded=submission.regraded + 1,
                note="being graded again with the assignment's updated tests",
            )  # fmt: skip
            _add_results(submission, tests)
        transaction.on_commit(pump)
    return len(latest)


# --- the grading queue --------------------------------------------------------------------


def pump() -> int:
    """Hand out free grading slots: checks of tests already begun first, then the next test of the
    student of a course served longest ago. Returns the grading runs started."""
    started = 0
    with transaction.atomic():
        GradingLock.objects.select_for_update().get_or_create(id=1)
        grading = Run.objects.filter(kind__in=(RunKind.TEST, RunKind.CHECK), state__in=ACTIVE_STATES)
        free = settings.CORDON_GRADING_SLOTS - grading.count()
        if free <= 0:
            return 0
        for result in _checks_due(free):
            started += _start_on_its_own(result, check=True)
        free -= started
        if free <= 0:
            return started
        # Keys only (the whole queue can be thousands of results, each with its test's texts): the
        # rows of the results chosen are loaded when they are started.
        pending = TestResult.objects.filter(status=TestStatus.PENDING, run=None).order_by(
            "submission__created_at", "position"
        )
        by_student: dict[tuple[Any, int], list[tuple[int, Any]]] = {}
        keys = ("id", "submission__assignment__course_id", "submission__student_id", "submission__created_at")
        for result_id, course_id, student_id, submitted_at in pending.values_list(*keys):
            by_student.setdefault((course_id, student_id), []).append((result_id, submitted_at))
        if not by_student:
            return started
        served = {
            (m.course_id, m.user_id): m
            for m in Membership.objects.filter(
                course_id__in={c for c, _ in by_student}, user_id__in={u for _, u in by_student}
            )
        }
        epoch = timezone.now() - timedelta(days=36500)

        def turn(key: tuple[Any, int]) -> tuple[Any, Any, int]:
            """A student's place: when they were last served, or (if later) when they submitted
            the oldest submission still waiting. So each student waits behind those served or
            submitting before them, a student served just now goes to the back, and one with
            fifty submissions is one student in the line, not fifty."""
            last = getattr(served.get(key), "served_at", None) or epoch
            waiting = by_student[key][0][1]
            return max(last, waiting), waiting, key[1]

        while free > 0 and by_student:
            key = min(by_student, key=turn)
            result_id, _ = by_student[key].pop(0)
            if not by_student[key]:
                del by_student[key]
            now = timezone.now()
            if key in served:
                served[key].served_at = now
                Membership.objects.filter(id=served[key].id).update(served_at=now)
            result = TestResult.objects.select_related("submission__assignment__course").get(id=result_id)
            started += _start_on_its_own(result)
            free -= 1
    return started


def _start_on_its_own(result: TestResult, *, check: bool = False) -> int:
    """Start a result's test (or check) run; one that cannot be started (data that breaks a step) is
    `not_graded` with the reason, in a savepoint, and the queue goes on to the others."""
    try:
        with transaction.atomic():
            return _start_check(result) if check else _start_test(result)
    except Exception as exc:
        log.exception("grading: starting test result %s failed", result.id)
        _give_up(result, f"grading this test failed on the server ({type(exc).__name__}); not your code")
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
    engine = "smolvm" if course.require_vm else "auto"
    try:
        queue = choose_queue(engine)
        # The assignment's policy against the ceilings of today (the course's may have been lowered
        # since the assignment was saved): the instructor's to fix, not the student's.
        egress = check_egress(egress, course=course)
    except ServiceError as exc:  # no live host serves what the course requires, or the policy is refused
        _fail_infrastructure_now(submission, str(exc.message))
        return None
    run = Run.objects.create(
        owner=submission.student, kind=kind, course=course, runtime=runtime, code=code, stdin=stdin, args=args,
        staged_files=staged or [], limits=limits.to_json(), engine_requested=engine, queue=queue, egress=egress,
    )  # fmt: skip
    run.datasets.set(datasets)
    record_event(run=run, state=RunState.QUEUED, detail={"grading": kind, "submission": str(submission.id)})
    enqueue(run=run)
    return run


def _fail_infrastructure_now(submission: Submission, why: str) -> None:
    TestResult.objects.filter(submission=submission, status__in=IN_PROGRESS).update(
        status=TestStatus.NOT_GRADED, detail=why[:500], finished_at=timezone.now()
    )
    _finish_submission(submission.id)


# --- results ------------------------------------------------------------------------------


def settle(*, run_id: Any = None, budget_s: float = SETTLE_BUDGET_S) -> int:
    """Turn finished grading runs into results (a retry, a check to start, a pass or a fail), then
    hand out the slots they freed; with `run_id`, only that run's result (its worker's task does
    that). Idempotent: each result moves on by a conditional update. Each result is settled on its
    own: one that cannot be (a comparison that fails, data that breaks a step) is `not_graded` with
    the reason, and the others, of every student and course, go on. Past `budget_s` no further
    result is begun (each comparison takes up to its own bound): the next round goes on."""
    settled, deadline = 0, time.monotonic() + budget_s
    running = TestResult.objects.filter(status=TestStatus.RUNNING, run__state=RunState.FINISHED)
    checking = TestResult.objects.filter(status=TestStatus.CHECKING, check_run__state=RunState.FINISHED)
    if run_id is not None:
        running, checking = running.filter(run_id=run_id), checking.filter(check_run_id=run_id)
    steps = [(_settle_test, r) for r in running.select_related("run", "submission").order_by("run__finished_at")]
    steps += [(_settle_check, r) for r in checking.select_related("run", "check_run", "submission")]
    for step, result in steps:
        if time.monotonic() > deadline:
            break
        settled += _on_its_own(step, result)
    pump()
    return settled


def _on_its_own(step: Any, result: TestResult) -> int:
    try:
        return int(step(result))
    except Exception as exc:
        log.exception("grading: settling test result %s failed", result.id)
        why = f"grading this test failed on the server ({type(exc).__name__}); not your code"
        return _give_up(result, why)


def _give_up(result: TestResult, why: str) -> int:
    """`not_graded`, from whatever in-progress status it is in; if even that fails (the database
    away), it is left as it was and the next round tries again."""
    try:
        with transaction.atomic():
            done = TestResult.objects.filter(id=result.id, status__in=IN_PROGRESS).update(
                status=TestStatus.NOT_GRADED, score=None, detail=why[:500], finished_at=timezone.now()
            )
            if done:
                _finish_submission(result.submission_id)
        return done
    except Exception:
        log.exception("grading: could not mark test result %s not graded", result.id)
        return 0


def _settle_test(result: TestResult) -> int:
    run = result.run
    if run is None:
        return 0
    outcome = run.outcome or ""
    if outcome in INFRASTRUCTURE or outcome == Outcome.REJECTED_INPUT.value:
        return _retry_or_give_up(result, run, field="run")
    changes: dict[str, Any] = {"outcome": outcome, "exit_code": run.exit_code}
    if result.spec.get("check_code"):
        changes["status"] = TestStatus.CHECKING
        changes["check_run"] = None
        done = _move(result, TestStatus.RUNNING, changes)
        if done:
            Submission.objects.filter(id=result.submission_id).update(note="")
        return done
    if outcome != Outcome.SUCCEEDED.value:
        changes.update(
            status=outcome, score=0.0, detail=result_words(outcome, outcome=outcome, exit_code=run.exit_code)
        )
    else:
        got = run_log_read(run=run, stream="stdout", offset=0, limit=COMPARE_MAX)[0].decode("utf-8", errors="replace")
        verdict = compare(got, result.spec.get("expected_stdout") or "", result.spec.get("match", Match.STRIP))
        score = None if verdict.status == TestStatus.NOT_GRADED else result.points if verdict.passed else 0.0
        changes.update(status=verdict.status, score=score, diff=verdict.diff, detail=verdict.detail)
    changes["finished_at"] = timezone.now()
    with transaction.atomic():  # the result and its submission move together, or neither does
        done = _move(result, TestStatus.RUNNING, changes)
        if done:
            _finish_submission(result.submission_id)
    return done


def _settle_check(result: TestResult) -> int:
    check = result.check_run
    if check is None:
        return 0
    outcome = check.outcome or ""
    _remove_staged(check)  # a retry stages them afresh
    if outcome in INFRASTRUCTURE:
        return _retry_or_give_up(result, check, field="check_run")
    feedback = run_log_read(run=check, stream="stdout", offset=0, limit=FEEDBACK_MAX)[0].decode(errors="replace")
    changes: dict[str, Any] = {"feedback": feedback, "finished_at": timezone.now()}
    if outcome == Outcome.SUCCEEDED.value:
        changes.update(status=TestStatus.PASSED, score=result.points, detail="")
    elif outcome == Outcome.FAILED.value:  # the check program said no (a non-zero exit)
        student = result.outcome
        status = student if student and student != Outcome.SUCCEEDED.value else TestStatus.FAILED
        words = result_words(status, outcome=student, exit_code=result.exit_code, checked=True)
        changes.update(status=status, score=0.0, detail=words)
    else:  # the instructor's program itself ran out of something: not the student's doing
        changes.update(status=TestStatus.NOT_GRADED, score=None,
                       detail=f"the check program ended with {outcome}: the instructor's to fix")  # fmt: skip
    with transaction.atomic():
        done = _move(result, TestStatus.CHECKING, changes)
        if done:
            _finish_submission(result.submission_id)
    return done


def _retry_or_give_up(result: TestResult, run: Run, *, field: str) -> int:
    why = f"{run.outcome}: {run.error_code or run.reason}"[:300]
    if result.tries < MAX_TRIES and run.outcome != Outcome.REJECTED_INPUT.value:
        status = TestStatus.PENDING if field == "run" else TestStatus.CHECKING
        changes: dict[str, Any] = {field: None}
        if field == "run":
            changes["status"] = status
        else:
            changes["tries"] = result.tries + 1
        done = _move(result, result.status, changes)
        if done:
            note = (f"the grader hit an error on test {result.name!r} ({run.outcome}); it is being retried "
                    "and this does not count against you")  # fmt: skip
            Submission.objects.filter(id=result.submission_id).update(note=note[:500])
        return done
    with transaction.atomic():
        done = _move(result, result.status, {"status": TestStatus.NOT_GRADED, "detail": why,
                                             "finished_at": timezone.now()})  # fmt: skip
        if done:
            _finish_submission(result.submission_id)
    return done


def _move(result: TestResult, from_status: str, changes: dict[str, Any]) -> int:
    """The conditional update that moves a result on exactly once, whoever settles it."""
    key = {"id": result.id, "status": from_status}
    if from_status == TestStatus.RUNNING:
        key["run"] = result.run_id
    elif from_status == TestStatus.CHECKING:
        key["check_run"] = result.check_run_id
    return TestResult.objects.filter(**key).update(**changes)


def _finish_submission(submission_id: Any) -> None:
    """Once every test has a result: graded (scored, charged) or, if the grader failed on any,
    not graded (not charged: the student is told, and may submit again)."""
    with transaction.atomic():
        submission = Submission.objects.select_for_update().get(id=submission_id)
        results = list(submission.results.all())
        if any(r.status in IN_PROGRESS for r in results):
            return
        now = timezone.now()
        failed = [r for r in results if r.status == TestStatus.NOT_GRADED]
        if failed:
            names = ", ".join(repr(r.name) for r in failed[:3])
            submission.state, submission.score = SubmissionState.NOT_GRADED, None
            if submission.charged is None:
                submission.charged = False
                submission.note = (f"not graded: the grader failed on {names} (not your code); this submission "
                                   "does not count as an attempt")[:500]  # fmt: skip
            else:  # a regrade of a graded attempt: it stays counted, and the instructor can regrade again
                submission.note = f"the regrade failed on {names} (not your code); an instructor can regrade"[:500]
        else:
            submission.state = SubmissionState.GRADED
            submission.score = round(sum(r.score or 0.0 for r in results), 4)
            submission.charged = True if submission.charged is None else submission.charged
            if submission.note.startswith("the grader hit") or submission.note.startswith("being graded again"):
                submission.note = ""
        submission.graded_at = now
        submission.save(update_fields=["state", "score", "charged", "note", "graded_at"])


def _remove_staged(check: Run) -> None:
    """The copies of the student's results a check run was given (grading/<result>/try-N/): once it
    has ended they are not needed, and they must not outlive the logs they copy (retention)."""
    for staged in check.staged_files:
        if staged["path"].startswith("grading/"):
            delete_with_folders(default_storage, staged["path"])


# --- comparing output ---------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A test's output against its expectation: passed, failed (with a diff), or not graded (the
    comparison itself could not be made: the instructor's pattern, not the student's code)."""

    status: str
    diff: str = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == TestStatus.PASSED


def compare(got: str, expected: str, match: str) -> Verdict:
    """Equal outputs pass here (linear, no child), as does a match or a diff whose cost is bounded
    small before it starts (matching.compare_small); any other is made in a bounded child
    (runner.bounded: CORDON_COMPARE_CPU_S of CPU, a wall deadline, 512 MiB)."""
    if matching.equal(got, expected, match):
        return Verdict(TestStatus.PASSED)
    try:
        answer = matching.compare_small(got, expected, match) or bounded.call(
            COMPARE_JOB, {"got": got, "expected": expected, "match": match}, compare_bounds()
        )
    except bounded.HostWorkError as exc:
        if match != Match.REGEX:  # failed for sure; only its line diff could not be made in time
            lines = (expected.splitlines(keepends=True), got.splitlines(keepends=True))
            return Verdict(TestStatus.FAILED, matching.first_difference(*lines), WRONG_OUTPUT)
        return Verdict(TestStatus.NOT_GRADED, detail=f"the output could not be checked against this test's pattern "
                       f"({exc.message}): the instructor's to fix, not your code")  # fmt: skip
    if "error" in answer:
        return Verdict(TestStatus.NOT_GRADED, detail=f"this test's pattern cannot be used ({answer['error']}): "
                       "the instructor's to fix, not your code")  # fmt: skip
    if answer["passed"]:
        return Verdict(TestStatus.PASSED)
    return Verdict(TestStatus.FAILED, answer["diff"], WRONG_OUTPUT)


def compare_bounds() -> bounded.Bounds:
    cpu_s = settings.CORDON_COMPARE_CPU_S
    room = 2 * COMPARE_MAX + 4 * matching.PATTERN_MAX_BYTES + 256 * 1024  # got, expected (JSON-escaped at worst)
    return bounded.Bounds(cpu_s=cpu_s, wall_s=cpu_s * 2 + 3.0, memory_mib=512, input_max_bytes=4 * room,
                          output_max_bytes=4 * matching.DIFF_MAX + 1024)  # fmt: skip


# --- the Run button -----------------------------------------------------------------------


def assignment_try(
    *, user: User, assignment: Assignment, code: str, stdin: str = "", args: list[str] | None = None
) -> Run:
    """A student's own run of their code for an assignment (not a submission): the course's
    datasets under /input, the assignment's limits and egress, the course's engine policy and quotas."""
    from playground.services.runs import run_create

    course = assignment.course
    return run_create(
        user=user, runtime=assignment.runtime, code=code, dataset_ids=[], limits=effective_limits(course,
                                                                                               assignment.limits),
        engine="smolvm" if course.require_vm else "auto", course=course, datasets=list(assignment.datasets.all()),
        stdin=stdin, args=args or [], egress=assignment.egress or [],
    )  # fmt: skip
