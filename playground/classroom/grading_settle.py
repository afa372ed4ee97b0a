"""Settling: finished grading runs turned into results, each on its own (one that cannot be settled
is not_graded with the reason; the others go on), a run that failed for the infrastructure's
reasons run again up to MAX_TRIES."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from playground.classroom.grading_compare import COMPARE_MAX, compare
from playground.classroom.grading_queue import pump
from playground.classroom.grading_results import (
    FEEDBACK_MAX,
    INFRASTRUCTURE,
    MAX_TRIES,
    finish_submission,
    give_up,
    move_result,
    result_words,
)
from playground.models import (
    Match,
    Run,
    RunState,
    Submission,
    TestResult,
    TestStatus,
)
from playground.selectors.runs import run_log_read
from playground.storage import delete_with_folders
from runner.spec import Outcome

log = logging.getLogger(__name__)


SETTLE_BUDGET_S = 30.0  # a settling round begins no result past this (the next round goes on)


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
        return give_up(result, why)


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
        done = move_result(result, TestStatus.RUNNING, changes)
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
        done = move_result(result, TestStatus.RUNNING, changes)
        if done:
            finish_submission(result.submission_id)
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
        done = move_result(result, TestStatus.CHECKING, changes)
        if done:
            finish_submission(result.submission_id)
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
        done = move_result(result, result.status, changes)
        if done:
            note = (f"the grader hit an error on test {result.name!r} ({run.outcome}); it is being retried "
                    "and this does not count against you")  # fmt: skip
            Submission.objects.filter(id=result.submission_id).update(note=note[:500])
        return done
    with transaction.atomic():
        done = move_result(result, result.status, {"status": TestStatus.NOT_GRADED, "detail": why,
                                             "finished_at": timezone.now()})  # fmt: skip
        if done:
            finish_submission(result.submission_id)
    return done


def _remove_staged(check: Run) -> None:
    """The copies of the student's results a check run was given (grading/<result>/try-N/): once it
    has ended they are not needed, and they must not outlive the logs they copy (retention)."""
    for staged in check.staged_files:
        if staged["path"].startswith("grading/"):
            delete_with_folders(default_storage, staged["path"])
