"""The classroom's answers, shaped for their viewer: a student never receives a hidden test's stdin,
args, expectation or check program, nor an after_due test's before the due time. Every test and
result the API sends leaves through `test_out` / `result_out`, which decide what the viewer may see."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from playground.classroom import grading_results
from playground.classroom import selectors as course_selectors
from playground.classroom.grading_queue import queue_place
from playground.classroom.selectors import (
    LateDays,
    assignment_past_due,
    details_open_at,
    is_staff,
    late_day_standing,
)
from playground.models import (
    Assignment,
    Course,
    Extension,
    Membership,
    Role,
    Run,
    ScoreAdjustment,
    Submission,
    SubmissionState,
    TestResult,
    TestStatus,
    Visibility,
)
from playground.selectors.runs import run_log_read


def course_out(course: Course, membership: Membership) -> dict[str, Any]:
    roles = list(course.memberships.values_list("role", flat=True))
    staff = is_staff(membership)
    return {
        "id": course.id, "title": course.title, "role": membership.role,
        "join_code": course.join_code if staff else None, "join_open": course.join_code is not None,
        "allowed_runtimes": course.allowed_runtimes, "limits_ceiling": course.limits_ceiling,
        "egress_ceiling": course.egress_ceiling, "require_vm": course.require_vm,
        "quota_concurrent_runs": course.quota_concurrent_runs, "quota_runs_per_hour": course.quota_runs_per_hour,
        "late_days": course.late_days, "late_days_per_assignment": course.late_days_per_assignment,
        "created_at": course.created_at,
        "students": roles.count(Role.STUDENT), "staff": len(roles) - roles.count(Role.STUDENT),
    }  # fmt: skip


def membership_out(membership: Membership, *, staff_view: bool) -> dict[str, Any]:
    return {
        "course_id": membership.course_id, "course_title": membership.course.title,
        "username": membership.user.get_username(), "email": membership.user.email if staff_view else "",
        "role": membership.role, "joined_at": membership.joined_at,
    }  # fmt: skip


def details_shown(visibility: str, assignment: Assignment, staff: bool, student: Any) -> bool:
    """Whether a test's details (stdin, args, expectation, diff, feedback) may be shown to the
    student (an after_due test's: once the student can no longer submit on time or with late days)."""
    if staff or visibility == Visibility.VISIBLE:
        return True
    if visibility != Visibility.AFTER_DUE:
        return False
    opens = details_open_at(assignment, student)
    return opens is not None and opens <= timezone.now()


def test_out(test: Any, assignment: Assignment, staff: bool, student: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": test.name, "points": test.points, "visibility": test.visibility}
    if staff:
        out.update(
            id=test.id, stdin=test.stdin, args=test.args, expected_stdout=test.expected_stdout, match=test.match,
            check_code=test.check_code, check_runtime=test.check_runtime or None,
        )  # fmt: skip
    elif details_shown(test.visibility, assignment, staff, student):
        out.update(stdin=test.stdin, args=test.args, expected_stdout=test.expected_stdout, match=test.match)
    return out


def result_out(result: TestResult, assignment: Assignment, staff: bool, student: Any) -> dict[str, Any]:
    shown = details_shown(result.visibility, assignment, staff, student)
    status, words = result.status, grading_results.words_for(result)
    if not shown and status not in grading_results.STATUS_WORDS:
        status, words = "failed", grading_results.HIDDEN_FAILED  # a hidden test says pass or fail, not how it failed
    out: dict[str, Any] = {
        "name": result.name, "points": result.points, "visibility": result.visibility, "status": status,
        "status_text": words, "score": result.score,
    }  # fmt: skip
    if shown:
        spec = result.spec
        out.update(
            detail=result.detail, diff=result.diff, feedback=result.feedback, stdin=spec.get("stdin"),
            args=spec.get("args"), expected_stdout=spec.get("expected_stdout"),
        )  # fmt: skip
        # A program that crashed on a test the student may see shows them its error (the end of its stderr,
        # a traceback's last lines), as Gradescope does; a test they may not see stays silent.
        if result.run is not None and not staff and result.status != TestStatus.PASSED:
            out["stderr_tail"] = log_tail(result.run, "stderr", STDERR_TAIL_BYTES) or None
    if staff:
        out.update(run_id=result.run_id, check_run_id=result.check_run_id)
        if result.run is not None:  # every test's streams of the student's program, on the submission's page
            out.update(stdout=log_tail(result.run, "stdout", STAFF_STREAM_BYTES),
                       stderr=log_tail(result.run, "stderr", STAFF_STREAM_BYTES))  # fmt: skip
    return out


# What of a test's streams its result shows: the end, where a traceback and the last output are.
STDERR_TAIL_BYTES = 4096
STAFF_STREAM_BYTES = 64 * 1024


def log_tail(run: Run, stream: str, limit: int) -> str:
    """The last `limit` bytes of a finished run's stream as text, from a whole line where one starts
    within them; "" when it wrote nothing."""
    size = run.stderr_bytes if stream == "stderr" else run.stdout_bytes
    if not size:
        return ""
    start = max(0, size - limit)
    data, _, _ = run_log_read(run=run, stream=stream, offset=start, limit=limit)
    if start and b"\n" in data[:-1]:
        data = data[data.index(b"\n") + 1 :]
    text = data.decode("utf-8", errors="replace")
    return f"…\n{text}" if start else text


def attempt_numbers(submissions: list[Submission]) -> dict[Any, int]:
    """Each counted submission's attempt number, per student, oldest first."""
    numbers: dict[Any, int] = {}
    counts: dict[int, int] = {}
    for submission in sorted(submissions, key=lambda s: s.created_at):
        if submission.counted:
            counts[submission.student_id] = counts.get(submission.student_id, 0) + 1
            numbers[submission.id] = counts[submission.student_id]
    return numbers


def submission_out(submission: Submission, *, staff: bool, attempt: int | None, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": submission.id, "assignment_id": submission.assignment_id,
        "student": submission.student.get_username(), "state": submission.state, "score": submission.score,
        "max_score": submission.max_score, "adjustment": submission.adjustment,
        "final_score": submission.final_score, "charged": submission.charged, "late": submission.late,
        "late_days": submission.late_days, "attempt": attempt, "note": submission.note,
        "created_at": submission.created_at, "graded_at": submission.graded_at,
    }  # fmt: skip
    if full:
        assignment = submission.assignment
        out["code"] = submission.code
        results = submission.results.select_related("run")
        out["tests"] = [result_out(r, assignment, staff, submission.student) for r in results]
        out["adjustments"] = [adjustment_out(a, staff=staff) for a in submission.adjustments.all()
                              if staff or a.withdrawn_at is None]  # fmt: skip
        waiting = submission.state in (SubmissionState.QUEUED, SubmissionState.GRADING)
        out["queue"] = queue_place(submission) if waiting else None
    return out


def adjustment_out(adjustment: ScoreAdjustment, *, staff: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": adjustment.id, "points": adjustment.points, "comment": adjustment.comment, "by": adjustment.by_username,
        "at": adjustment.at, "rubric_item_id": adjustment.rubric_item_id,
    }  # fmt: skip
    if staff:
        out.update(withdrawn_at=adjustment.withdrawn_at, withdrawn_by=adjustment.withdrawn_by_username or None)
    return out


def late_days_out(standing: LateDays, assignment: Assignment) -> dict[str, Any]:
    """A student's late days in words too: "1 late day used, 2 left"."""
    used, left = standing.used, standing.left
    text = f"{used} late day{'s' if used != 1 else ''} used, {left} left" if standing.allowed else ""
    return {
        "allowed": standing.allowed, "per_assignment": standing.per_assignment, "used": used, "left": left,
        "on_this_assignment": standing.on(assignment.id), "text": text,
    }  # fmt: skip


def my_progress(assignment: Assignment, user: Any) -> dict[str, Any]:
    mine = course_selectors.submissions_of(assignment=assignment, student=user)
    used = sum(1 for s in mine if s.counted)
    latest = next((s for s in mine if s.state == SubmissionState.GRADED), mine[0] if mine else None)
    left = None if not assignment.attempts_allowed else max(0, assignment.attempts_allowed - used)
    extension = Extension.objects.filter(assignment=assignment, student=user).first()
    return {
        "score": latest.final_score if latest else None, "state": latest.state if latest else None,
        "attempts_used": used, "attempts_left": left, "submission_id": latest.id if latest else None,
        "late": latest.late if latest else False,
        "due_at": extension.due_at if extension else assignment.due_at,
        "extended": extension is not None,
        "late_days": late_days_out(late_day_standing(assignment.course, user), assignment),
    }  # fmt: skip


def assignment_out(assignment: Assignment, membership: Membership) -> dict[str, Any]:
    staff = is_staff(membership)
    tests = list(assignment.tests.all())
    return {
        "id": assignment.id, "course_id": assignment.course_id, "course_title": assignment.course.title,
        "title": assignment.title, "instructions": assignment.instructions,
        "instructions_html": assignment.instructions_html, "runtime": assignment.runtime,
        "environment": assignment.environment, "starter_code": assignment.starter_code,
        "datasets": list(assignment.datasets.all()),
        "limits": assignment.limits, "egress": assignment.egress, "opens_at": assignment.opens_at,
        "due_at": assignment.due_at,
        "past_due": assignment_past_due(assignment), "attempts_allowed": assignment.attempts_allowed,
        "accept_late": assignment.accept_late, "max_score": sum(t.points for t in tests),
        "tests_version": assignment.tests_version, "is_staff": staff,
        "published": assignment.published_at is not None, "published_at": assignment.published_at,
        "rubric": [{"id": r.id, "label": r.label, "points": r.points} for r in assignment.rubric_items.all()]
        if staff else [],
        "tests": [test_out(t, assignment, staff, membership.user) for t in tests],
        "my": None if staff else my_progress(assignment, membership.user),
    }  # fmt: skip
