"""A grading result and how it moves: the statuses, the words a person reads for one, and the
steps every part of grading takes with it (a conditional move from one status to the next, giving
up with a reason, and a submission finished once its last result is)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from playground.classroom.signals import score_changed
from playground.models import (
    LateDaySpend,
    Submission,
    SubmissionState,
    TestResult,
    TestStatus,
)
from runner.spec import Outcome

log = logging.getLogger(__name__)


MAX_TRIES = 3  # grading runs of one test (or check) that ended in an infrastructure outcome


INFRASTRUCTURE = {Outcome.SANDBOX_ERROR.value, Outcome.REJECTED_CAPACITY.value, Outcome.CANCELLED.value}


FINAL = {TestStatus.PASSED, TestStatus.FAILED, TestStatus.NOT_GRADED}


IN_PROGRESS = (TestStatus.PENDING, TestStatus.RUNNING, TestStatus.CHECKING)


FEEDBACK_MAX = 8 * 1024


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


def give_up(result: TestResult, why: str) -> int:
    """`not_graded`, from whatever in-progress status it is in; if even that fails (the database
    away), it is left as it was and the next round tries again."""
    try:
        with transaction.atomic():
            done = TestResult.objects.filter(id=result.id, status__in=IN_PROGRESS).update(
                status=TestStatus.NOT_GRADED, score=None, detail=why[:500], finished_at=timezone.now()
            )
            if done:
                finish_submission(result.submission_id)
        return done
    except Exception:
        log.exception("grading: could not mark test result %s not graded", result.id)
        return 0


def move_result(result: TestResult, from_status: str, changes: dict[str, Any]) -> int:
    """The conditional update that moves a result on exactly once, whoever settles it."""
    key = {"id": result.id, "status": from_status}
    if from_status == TestStatus.RUNNING:
        key["run"] = result.run_id
    elif from_status == TestStatus.CHECKING:
        key["check_run"] = result.check_run_id
    return TestResult.objects.filter(**key).update(**changes)


def _give_back_late_days(submission: Submission) -> None:
    """A submission not graded through no fault of the student's gives back the late days it spent
    (in its finishing transaction; the student's next late submission counts them again)."""
    LateDaySpend.objects.filter(assignment_id=submission.assignment_id, student_id=submission.student_id).update(
        days=Greatest(F("days") - submission.late_days, 0)
    )
    submission.late_days = 0


def finish_submission(submission_id: Any) -> None:
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
                if submission.late_days:  # nor does it keep the late days it spent
                    _give_back_late_days(submission)
                    submission.note = (submission.note + ", and its late days were given back")[:500]
            else:  # a regrade of a graded attempt: it stays counted, and the instructor can regrade again
                submission.note = f"the regrade failed on {names} (not your code); an instructor can regrade"[:500]
        else:
            submission.state = SubmissionState.GRADED
            submission.score = round(sum(r.score or 0.0 for r in results), 4)
            submission.charged = True if submission.charged is None else submission.charged
            if submission.note.startswith("the grader hit") or submission.note.startswith("being graded again"):
                submission.note = ""
        submission.graded_at = now
        submission.save(update_fields=["state", "score", "charged", "note", "graded_at", "late_days"])
        if submission.state == SubmissionState.GRADED:
            transaction.on_commit(lambda: score_changed.send(sender=Submission, submission=submission))
