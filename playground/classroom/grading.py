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
`not_graded` and not charged as an attempt, and its student is told so.

Here: submitting, regrading and the Run button. The rest, one job each: `grading_results` (a
result's statuses, words and moves), `grading_queue` (pump and the grading runs it starts),
`grading_settle` (finished runs into results) and `grading_compare` (output against expectation)."""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from playground import throttle
from playground.classroom.courses import course_engine, effective_limits
from playground.classroom.grading_queue import pump
from playground.classroom.grading_results import finish_submission
from playground.classroom.selectors import assignment_is_open, due_for, late_day_standing
from playground.environments import environment_for
from playground.errors import ServiceError
from playground.models import (
    Assignment,
    AssignmentTest,
    LateDaySpend,
    Run,
    Submission,
    SubmissionState,
    TestResult,
)
from playground.services.runs import MAX_CODE_BYTES, run_create
from runner.units import size_words

log = logging.getLogger(__name__)


def attempts_used(*, assignment: Assignment, student: User) -> int:
    """Submissions that count: graded (charged) ones and those still being graded."""
    mine = Submission.objects.filter(assignment=assignment, student=student)
    return mine.exclude(charged=False).count()  # Submission.counted, in the database


def submission_create(*, user: User, assignment: Assignment, code: str) -> Submission:
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ServiceError("code_too_large", f"code is over {size_words(MAX_CODE_BYTES)}", field="code", status=422)
    if not assignment_is_open(assignment):
        raise ServiceError("not_open", "this assignment is not open yet", status=422)
    _check_rate(user, assignment)
    tests = list(assignment.tests.all())
    with transaction.atomic():
        # One submission of a student at a time, so the attempt count, the late days spent and the
        # insert cannot race (two late submissions with one late day left spend it once).
        User.objects.select_for_update().get(pk=user.pk)
        used = attempts_used(assignment=assignment, student=user)
        if assignment.attempts_allowed and used >= assignment.attempts_allowed:
            raise ServiceError("no_attempts_left", f"all {assignment.attempts_allowed} attempts are used", status=422)
        late, late_days = _lateness(assignment, user)
        submission = Submission.objects.create(
            assignment=assignment, student=user, code=code, late=late, late_days=late_days,
            tests_version=assignment.tests_version, max_score=sum(t.points for t in tests),
        )  # fmt: skip
        _add_results(submission, tests)
        transaction.on_commit(pump)
    return submission


def _lateness(assignment: Assignment, user: User) -> tuple[bool, int]:
    """Whether a submission now is late, and the late days it spends (under the student's lock).
    Past the student's due time (an extension's, else the assignment's) it needs one late day per
    day begun; those the student already spent on this assignment count. Late days are spent when
    the course has enough of them left and the assignment allows that many; otherwise the
    submission is late (if the assignment accepts late work) or refused."""
    due = due_for(assignment, user)
    now = timezone.now()
    if due is None or now <= due:
        return False, 0
    needed = math.ceil((now - due) / timedelta(days=1))
    standing = late_day_standing(assignment.course, user)
    spent_here = standing.on(assignment.id)
    if needed <= spent_here:
        return False, 0
    extra = needed - spent_here
    if standing.allowed and needed <= standing.per_assignment and extra <= standing.left:
        spend, _ = LateDaySpend.objects.get_or_create(course=assignment.course, assignment=assignment, student=user)
        LateDaySpend.objects.filter(id=spend.id).update(days=needed)
        return False, extra
    if assignment.accept_late:
        return True, 0
    why = "the due time has passed and late submissions are not accepted"
    if standing.allowed:
        why = (f"the due time has passed: this needs {needed} late day{'s' if needed != 1 else ''} on this "
               f"assignment (at most {standing.per_assignment}), and you have {standing.left} left")  # fmt: skip
    raise ServiceError("past_due", why, status=422)


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
        finish_submission(submission.id)


def _spec(test: AssignmentTest, assignment: Assignment) -> dict[str, Any]:
    return {
        "stdin": test.stdin, "args": list(test.args or []), "expected_stdout": test.expected_stdout,
        "match": test.match, "check_code": test.check_code, "check_runtime": test.check_runtime or assignment.runtime,
    }  # fmt: skip


def regrade(*, assignment: Assignment) -> int:
    """Grade every student's latest graded submission (or one whose last regrade failed) again with
    the current tests (after the instructor changed them). The attempt stays charged as it
    was; the score is replaced. One regrade of an assignment at a time: while one is under way
    another is refused (409), so requests in a row queue each submission once, not once each."""
    with transaction.atomic():
        Assignment.objects.select_for_update().filter(id=assignment.id).first()  # regrades of it, one by one
        under_way = regrading(assignment)
        if under_way:
            raise ServiceError(
                "regrade_in_progress", f"a regrade of this assignment is under way: {under_way} submission"
                f"{'s are' if under_way != 1 else ' is'} still being graded again; regrade once it is done",
                status=409,
            )  # fmt: skip
        tests = list(assignment.tests.all())
        latest: dict[int, Submission] = {}
        graded = Q(state=SubmissionState.GRADED) | Q(state=SubmissionState.NOT_GRADED, regraded__gt=0)
        for submission in assignment.submissions.filter(graded).order_by("created_at"):
            latest[submission.student_id] = submission
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


def regrading(assignment: Assignment) -> int:
    """How many of the assignment's submissions a regrade is still grading again."""
    return assignment.submissions.filter(
        regraded__gt=0, state__in=(SubmissionState.QUEUED, SubmissionState.GRADING)
    ).count()


def assignment_try(
    *, user: User, assignment: Assignment, code: str, stdin: str = "", args: list[str] | None = None
) -> Run:
    """A student's own run of their code for an assignment (not a submission): the course's
    datasets under /input, the assignment's limits and egress, the course's engine policy and quotas."""
    course = assignment.course
    return run_create(
        user=user, runtime=assignment.runtime, code=code, dataset_ids=[], limits=effective_limits(course,
                                                                                               assignment.limits),
        engine=course_engine(course), course=course, datasets=list(assignment.datasets.all()),
        stdin=stdin, args=args or [], egress=assignment.egress or [],
        environment=environment_for(assignment.environment, assignment.runtime),
    )  # fmt: skip
