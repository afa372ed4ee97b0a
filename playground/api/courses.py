"""The classroom's API (a router of the API, under /api): courses, members, roster
imports, course datasets, assignments with their tests, submissions and the gradebook. Thin, like
the rest of the API: access through selectors/courses.py (404 for whoever may not see a thing), writes through
services/courses.py and services/grading.py. A student never receives a hidden test's stdin,
args, expectation or check program, nor an after_due test's before the due time: every test and
result leaves through `_test_out` / `_result_out`, which decide what the viewer may see."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse
from django.utils.http import content_disposition_header
from ninja import Field, File, Router, Schema, Status
from ninja.files import UploadedFile
from ninja.params.functions import Query

from playground import throttle
from playground.api.datasets import REPLACE_DOC
from playground.api.runs import STAFF_POLL_RECORD_WINDOW
from playground.api.schemas import MAX_IDS, DatasetOut, RunOut, RuntimeName, answers, run_out, uploaded_file
from playground.bodies import NOT_BLANK, BodyIn, Bool, DateTime, Int, Number, Text
from playground.csvcells import csv_cell
from playground.egress import SiteEgressPolicy
from playground.errors import ServiceError
from playground.limits import LimitsCeilingIn, LimitsIn, limits_set
from playground.models import (
    Assignment,
    Course,
    Dataset,
    Membership,
    Role,
    Submission,
    SubmissionState,
    TestResult,
    Visibility,
)
from playground.selectors import courses as course_selectors
from playground.selectors.courses import assignment_past_due, is_staff
from playground.selectors.runs import staff_access_recorded_since
from playground.services import courses as course_services
from playground.services import datasets as dataset_services
from playground.services import grading, grading_results
from playground.services.audit import record_staff_access
from runner.spec import RUNTIMES
from runner.units import size_words

router = Router(tags=["courses"])
ROSTER_MAX_BYTES = 1 << 20


# --- schemas ------------------------------------------------------------------------------


# A title or a name that is not blank (the services strip it: one of spaces only is refused).
Title = Annotated[str, Field(min_length=1, max_length=200, pattern=NOT_BLANK)]


class CoursePatchIn(BodyIn):
    title: Title | None = None
    allowed_runtimes: list[RuntimeName] | None = Field(default=None, min_length=1, max_length=len(RUNTIMES))
    limits_ceiling: LimitsCeilingIn | None = None  # type: ignore[valid-type]
    egress_ceiling: SiteEgressPolicy | None = Field(
        default=None, description="what the course's runs may reach at most, within this service's ceiling; "
        "empty: no network for any of its runs"
    )  # fmt: skip
    require_vm: Bool | None = None
    quota_concurrent_runs: Int | None = Field(default=None, ge=1, le=100_000)
    quota_runs_per_hour: Int | None = Field(default=None, ge=1, le=100_000)


class CourseIn(CoursePatchIn):
    title: Title


class CourseOut(Schema):
    id: UUID
    title: str
    role: str
    join_code: str | None = Field(description="staff only; null when joining is closed")
    join_open: bool
    allowed_runtimes: list[str]
    limits_ceiling: dict[str, float]
    egress_ceiling: list[str]
    require_vm: bool
    quota_concurrent_runs: int
    quota_runs_per_hour: int
    created_at: datetime
    students: int
    staff: int


class JoinIn(BodyIn):
    join_code: Text = Field(max_length=64)


class JoinCodeIn(BodyIn):
    action: Literal["rotate", "close"]


class MembershipOut(Schema):
    course_id: UUID
    course_title: str
    username: str
    email: str
    role: str
    joined_at: datetime


class RoleIn(BodyIn):
    role: Literal["instructor", "assistant", "student"]


class RosterOut(Schema):
    invited: int
    already_members: int
    already_invited: int
    invalid: list[str]


class CourseInvitationOut(Schema):
    id: int
    identifier: str
    role: str
    created_at: datetime
    accepted_at: datetime | None
    accepted_by: str | None


class MyInvitationOut(Schema):
    id: int
    course_id: UUID
    course_title: str
    role: str
    created_at: datetime


class TestIn(BodyIn):
    name: Title
    points: Number = Field(default=1, ge=0, le=1000)
    visibility: Literal["visible", "hidden", "after_due"] = "visible"
    stdin: Text = ""
    args: list[Text] = Field(default=[], max_length=64)
    expected_stdout: Text | None = None
    match: Literal["exact", "strip", "regex"] = "strip"
    check_code: Text | None = None
    check_runtime: RuntimeName | None = None


class AssignmentIn(BodyIn):
    title: Title
    instructions: Text = ""
    runtime: RuntimeName
    starter_code: Text = ""
    dataset_ids: list[UUID] = Field(default=[], max_length=MAX_IDS)
    limits: LimitsIn = Field(default_factory=LimitsIn)  # type: ignore[valid-type]
    egress: SiteEgressPolicy = Field(
        default=[], description="what its runs (the Run button, each test's) may reach, within the course's "
        "egress ceiling; a check program has no network"
    )  # fmt: skip
    opens_at: DateTime | None = None
    due_at: DateTime | None = None
    attempts_allowed: Int = Field(default=0, ge=0, le=10_000)
    accept_late: Bool = False
    tests: list[TestIn] = Field(default=[], max_length=course_services.MAX_TESTS)


class MyProgressOut(Schema):
    score: float | None
    state: str | None
    attempts_used: int
    attempts_left: int | None = Field(description="null: unlimited")
    submission_id: UUID | None
    late: bool


class AssignmentSummaryOut(Schema):
    id: UUID
    title: str
    runtime: str
    opens_at: datetime | None
    due_at: datetime | None
    max_score: float
    attempts_allowed: int
    accept_late: bool
    my: MyProgressOut | None


class TestOut(Schema):
    id: int | None = None
    name: str
    points: float
    visibility: str
    stdin: str | None = None
    args: list[str] | None = None
    expected_stdout: str | None = None
    match: str | None = None
    check_code: str | None = None
    check_runtime: str | None = None


class AssignmentOut(Schema):
    id: UUID
    course_id: UUID
    course_title: str
    title: str
    instructions: str
    instructions_html: str
    runtime: str
    starter_code: str
    datasets: list[DatasetOut]
    limits: dict[str, float]
    egress: list[str]
    opens_at: datetime | None
    due_at: datetime | None
    past_due: bool
    attempts_allowed: int
    accept_late: bool
    max_score: float
    tests_version: int
    is_staff: bool
    tests: list[TestOut]
    my: MyProgressOut | None


class RegradeOut(Schema):
    regrading: int


class TryIn(BodyIn):
    code: Text
    stdin: Text = ""
    args: list[Text] = Field(default=[], max_length=64)


class SubmissionIn(BodyIn):
    code: Text


class TestResultOut(Schema):
    name: str
    points: float
    visibility: str
    status: str
    status_text: str
    score: float | None
    detail: str | None = None
    diff: str | None = None
    feedback: str | None = None
    stdin: str | None = None
    args: list[str] | None = None
    expected_stdout: str | None = None
    run_id: UUID | None = None
    check_run_id: UUID | None = None


class SubmissionSummaryOut(Schema):
    id: UUID
    assignment_id: UUID
    student: str
    state: str
    score: float | None
    max_score: float
    charged: bool | None
    late: bool
    attempt: int | None = Field(description="which counted attempt this is (null: not counted, or not yet)")
    note: str
    created_at: datetime
    graded_at: datetime | None


class SubmissionOut(SubmissionSummaryOut):
    code: str
    tests: list[TestResultOut]


class GradeCellOut(Schema):
    assignment_id: UUID
    score: float | None
    state: str
    attempts: int
    late: bool
    submission_id: UUID


class GradeRowOut(Schema):
    username: str
    cells: list[GradeCellOut | None]


class GradebookAssignmentOut(Schema):
    id: UUID
    title: str
    max_score: float


class GradebookOut(Schema):
    assignments: list[GradebookAssignmentOut]
    students: list[GradeRowOut]


# --- shaping what a viewer may see ---------------------------------------------------------


def _course_out(course: Course, membership: Membership) -> dict[str, Any]:
    roles = list(course.memberships.values_list("role", flat=True))
    staff = is_staff(membership)
    return {
        "id": course.id, "title": course.title, "role": membership.role,
        "join_code": course.join_code if staff else None, "join_open": course.join_code is not None,
        "allowed_runtimes": course.allowed_runtimes, "limits_ceiling": course.limits_ceiling,
        "egress_ceiling": course.egress_ceiling, "require_vm": course.require_vm,
        "quota_concurrent_runs": course.quota_concurrent_runs, "quota_runs_per_hour": course.quota_runs_per_hour,
        "created_at": course.created_at,
        "students": roles.count(Role.STUDENT), "staff": len(roles) - roles.count(Role.STUDENT),
    }  # fmt: skip


def _membership_out(membership: Membership, *, staff_view: bool) -> dict[str, Any]:
    return {
        "course_id": membership.course_id, "course_title": membership.course.title,
        "username": membership.user.get_username(), "email": membership.user.email if staff_view else "",
        "role": membership.role, "joined_at": membership.joined_at,
    }  # fmt: skip


def _details_shown(visibility: str, assignment: Assignment, staff: bool) -> bool:
    """Whether a test's details (stdin, args, expectation, diff, feedback) may be shown."""
    if staff or visibility == Visibility.VISIBLE:
        return True
    return visibility == Visibility.AFTER_DUE and assignment_past_due(assignment)


def _test_out(test: Any, assignment: Assignment, staff: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": test.name, "points": test.points, "visibility": test.visibility}
    if staff:
        out.update(
            id=test.id, stdin=test.stdin, args=test.args, expected_stdout=test.expected_stdout, match=test.match,
            check_code=test.check_code, check_runtime=test.check_runtime or None,
        )  # fmt: skip
    elif _details_shown(test.visibility, assignment, staff):
        out.update(stdin=test.stdin, args=test.args, expected_stdout=test.expected_stdout, match=test.match)
    return out


def _result_out(result: TestResult, assignment: Assignment, staff: bool) -> dict[str, Any]:
    shown = _details_shown(result.visibility, assignment, staff)
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
    if staff:
        out.update(run_id=result.run_id, check_run_id=result.check_run_id)
    return out


def _attempt_numbers(submissions: list[Submission]) -> dict[Any, int]:
    """Each counted submission's attempt number, per student, oldest first."""
    numbers: dict[Any, int] = {}
    counts: dict[int, int] = {}
    for submission in sorted(submissions, key=lambda s: s.created_at):
        if submission.counted:
            counts[submission.student_id] = counts.get(submission.student_id, 0) + 1
            numbers[submission.id] = counts[submission.student_id]
    return numbers


def _submission_out(submission: Submission, *, staff: bool, attempt: int | None, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": submission.id, "assignment_id": submission.assignment_id,
        "student": submission.student.get_username(), "state": submission.state, "score": submission.score,
        "max_score": submission.max_score, "charged": submission.charged, "late": submission.late,
        "attempt": attempt, "note": submission.note, "created_at": submission.created_at,
        "graded_at": submission.graded_at,
    }  # fmt: skip
    if full:
        assignment = submission.assignment
        out["code"] = submission.code
        out["tests"] = [_result_out(r, assignment, staff) for r in submission.results.all()]
    return out


def _my_progress(assignment: Assignment, user: Any) -> dict[str, Any]:
    mine = course_selectors.submissions_of(assignment=assignment, student=user)
    used = sum(1 for s in mine if s.counted)
    latest = next((s for s in mine if s.state == SubmissionState.GRADED), mine[0] if mine else None)
    left = None if not assignment.attempts_allowed else max(0, assignment.attempts_allowed - used)
    return {
        "score": latest.score if latest else None, "state": latest.state if latest else None,
        "attempts_used": used, "attempts_left": left, "submission_id": latest.id if latest else None,
        "late": latest.late if latest else False,
    }  # fmt: skip


def _assignment_out(assignment: Assignment, membership: Membership) -> dict[str, Any]:
    staff = is_staff(membership)
    tests = list(assignment.tests.all())
    return {
        "id": assignment.id, "course_id": assignment.course_id, "course_title": assignment.course.title,
        "title": assignment.title, "instructions": assignment.instructions,
        "instructions_html": assignment.instructions_html, "runtime": assignment.runtime,
        "starter_code": assignment.starter_code, "datasets": list(assignment.datasets.all()),
        "limits": assignment.limits, "egress": assignment.egress, "opens_at": assignment.opens_at,
        "due_at": assignment.due_at,
        "past_due": assignment_past_due(assignment), "attempts_allowed": assignment.attempts_allowed,
        "accept_late": assignment.accept_late, "max_score": sum(t.points for t in tests),
        "tests_version": assignment.tests_version, "is_staff": staff,
        "tests": [_test_out(t, assignment, staff) for t in tests],
        "my": None if staff else _my_progress(assignment, membership.user),
    }  # fmt: skip


def _assignment_data(payload: AssignmentIn) -> dict[str, Any]:
    data = payload.model_dump()
    data["limits"] = limits_set(payload.limits)  # only those set: the others take their defaults when it runs
    data["opens_at"] = course_services.parse_when(payload.opens_at)
    data["due_at"] = course_services.parse_when(payload.due_at)
    return data


# --- courses ------------------------------------------------------------------------------


@router.post("/courses", response=answers({201: CourseOut}, 422))
def course_create(request: HttpRequest, payload: CourseIn) -> Status[Any]:
    policy = payload.model_dump(exclude={"title"}, exclude_none=True, exclude_unset=True)
    course = course_services.course_create(user=request.user, title=payload.title, policy=policy)  # type: ignore[arg-type]
    _, membership = course_selectors.course_for_member(user=request.user, course_id=course.id)
    return Status(201, _course_out(course, membership))


@router.get("/courses", response=answers({200: list[CourseOut]}))
def course_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [_course_out(m.course, m) for m in course_selectors.memberships_of(user=request.user)]


@router.post("/courses/join", response=answers({201: MembershipOut}, 404, 422))
def course_join(request: HttpRequest, payload: JoinIn) -> Status[Any]:
    wait_s = throttle.join_wait_s(request)
    if wait_s is not None:  # before the code is looked up: a right one is refused too
        raise ServiceError("throttled", throttle.join_refusal(wait_s), status=429, retry_after_s=wait_s)
    try:
        membership = course_services.course_join(user=request.user, join_code=payload.join_code)  # type: ignore[arg-type]
    except ServiceError as exc:
        if exc.code == "invalid_join_code":
            throttle.join_failed(request)
        raise
    return Status(201, _membership_out(membership, staff_view=False))


@router.get("/courses/{course_id}", response=answers({200: CourseOut}, 404, 422))
def course_get(request: HttpRequest, course_id: UUID) -> dict[str, Any]:
    course, membership = course_selectors.course_for_member(user=request.user, course_id=course_id)
    return _course_out(course, membership)


@router.patch("/courses/{course_id}", response=answers({200: CourseOut}, 404, 422))
def course_update(request: HttpRequest, course_id: UUID, payload: CoursePatchIn) -> dict[str, Any]:
    course, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    # A field left out or null is left as it is (an empty list or object clears a ceiling).
    course_services.course_update(course=course, changes=payload.model_dump(exclude_unset=True, exclude_none=True))
    return _course_out(course, membership)


@router.post("/courses/{course_id}/join-code", response=answers({200: CourseOut}, 404, 422))
def course_join_code(request: HttpRequest, course_id: UUID, payload: JoinCodeIn) -> dict[str, Any]:
    course, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    return _course_out(course_services.course_join_code(course=course, action=payload.action), membership)


@router.get("/courses/{course_id}/members", response=answers({200: list[MembershipOut]}, 404, 422))
def member_list(request: HttpRequest, course_id: UUID) -> list[dict[str, Any]]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    return [_membership_out(m, staff_view=True) for m in course_selectors.members(course)]


def _member(course: Course, username: str) -> Membership:
    membership = course_selectors.member(course, username)
    if membership is None:
        raise Http404("no such member")
    return membership


@router.patch("/courses/{course_id}/members/{username}", response=answers({200: MembershipOut}, 404, 409, 422))
def member_update(request: HttpRequest, course_id: UUID, username: str, payload: RoleIn) -> dict[str, Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    membership = course_services.member_set_role(course=course, membership=_member(course, username), role=payload.role)
    return _membership_out(membership, staff_view=True)


@router.delete("/courses/{course_id}/members/{username}", response=answers({204: None}, 404, 409, 422))
def member_remove(request: HttpRequest, course_id: UUID, username: str) -> Status[Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    course_services.member_remove(course=course, membership=_member(course, username))
    return Status(204, None)


@router.post("/courses/{course_id}/roster", response=answers({200: RosterOut}, 404, 422))
def roster_import(request: HttpRequest, course_id: UUID, file: UploadedFile | None = File(None)) -> dict[str, Any]:  # type: ignore[type-arg]  # noqa: B008
    """A CSV of usernames or email addresses (a second column may give the role: student or
    assistant); each one not yet a member gets an invitation, accepted from their courses page."""
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    upload = uploaded_file(request, file, "roster")
    if (upload.size or 0) > ROSTER_MAX_BYTES:
        raise ServiceError("too_large", f"a roster is at most {size_words(ROSTER_MAX_BYTES)}", field="file", status=413)
    return course_services.roster_import(course=course, by=request.user, data=upload.read())  # type: ignore[arg-type]


@router.get("/courses/{course_id}/invitations", response=answers({200: list[CourseInvitationOut]}, 404, 422))
def course_invitations(request: HttpRequest, course_id: UUID) -> list[dict[str, Any]]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    return [
        {"id": i.id, "identifier": i.identifier, "role": i.role, "created_at": i.created_at,
         "accepted_at": i.accepted_at, "accepted_by": i.accepted_by.get_username() if i.accepted_by else None}
        for i in course_selectors.invitations_of(course)
    ]  # fmt: skip


@router.get("/invitations", response=answers({200: list[MyInvitationOut]}))
def my_invitations(request: HttpRequest) -> list[dict[str, Any]]:
    return [
        {"id": i.id, "course_id": i.course_id, "course_title": i.course.title, "role": i.role,
         "created_at": i.created_at}
        for i in course_selectors.invitations_for_user(user=request.user)
    ]  # fmt: skip


@router.post("/invitations/{invitation_id}/accept", response=answers({201: MembershipOut}, 404, 422))
def invitation_accept(request: HttpRequest, invitation_id: int) -> Status[Any]:
    invitation = course_selectors.invitations_for_user(user=request.user).filter(id=invitation_id).first()
    if invitation is None:
        raise ServiceError("not_found", "no such invitation for you", status=404)
    membership = course_services.invitation_accept(user=request.user, invitation=invitation)  # type: ignore[arg-type]
    return Status(201, _membership_out(membership, staff_view=False))


# --- course datasets ----------------------------------------------------------------------


class CourseDatasetOut(DatasetOut):
    can_delete: bool = Field(
        description="an instructor may delete any course dataset, an assistant those they uploaded"
    )


@router.get("/courses/{course_id}/datasets", response=answers({200: list[CourseDatasetOut]}, 404, 422))
def course_dataset_list(request: HttpRequest, course_id: UUID) -> Any:
    course, membership = course_selectors.course_for_member(user=request.user, course_id=course_id)
    return [
        {**DatasetOut.model_validate(d).model_dump(), "can_delete": _may_delete(membership, d, request.user)}
        for d in course_selectors.course_datasets(course)
    ]


def _may_delete(membership: Membership, dataset: Dataset, user: Any) -> bool:
    return membership.role == Role.INSTRUCTOR or (is_staff(membership) and dataset.owner_id == user.pk)


@router.post("/courses/{course_id}/datasets", response=answers({201: DatasetOut}, 404, 409, 422))
def course_dataset_upload(
    request: HttpRequest,
    course_id: UUID,
    file: UploadedFile | None = File(None),  # type: ignore[type-arg]  # noqa: B008
    replace: bool = Query(False, description=REPLACE_DOC),
) -> Status[Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    upload = uploaded_file(request, file, "dataset")
    made = dataset_services.dataset_create(user=request.user, upload=upload, course=course, replace=replace)  # type: ignore[arg-type]
    return Status(201, made)


@router.delete("/courses/{course_id}/datasets/{dataset_id}", response=answers({204: None}, 404, 422))
def course_dataset_delete(request: HttpRequest, course_id: UUID, dataset_id: UUID) -> Status[Any]:
    """An instructor deletes any course dataset; an assistant only one they uploaded (403 otherwise)."""
    _, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    dataset = course_selectors.course_dataset_for_member(user=request.user, course_id=course_id, dataset_id=dataset_id)
    if not _may_delete(membership, dataset, request.user):
        raise ServiceError(
            "instructor_only", "only an instructor, or the assistant who uploaded it, may delete a course dataset",
            status=403,
        )  # fmt: skip
    dataset_services.dataset_delete(dataset=dataset)
    return Status(204, None)


# --- assignments --------------------------------------------------------------------------


@router.post("/courses/{course_id}/assignments", response=answers({201: AssignmentOut}, 404, 422))
def assignment_create(request: HttpRequest, course_id: UUID, payload: AssignmentIn) -> Status[Any]:
    course, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    assignment = course_services.assignment_save(course=course, data=_assignment_data(payload))
    return Status(201, _assignment_out(assignment, membership))


@router.get("/courses/{course_id}/assignments", response=answers({200: list[AssignmentSummaryOut]}, 404, 422))
def assignment_list(request: HttpRequest, course_id: UUID) -> list[dict[str, Any]]:
    course, membership = course_selectors.course_for_member(user=request.user, course_id=course_id)
    staff = is_staff(membership)
    out = []
    listed = course_selectors.assignments_for_member(course=course, membership=membership)
    for assignment, max_score in course_selectors.assignments_with_max_score(listed):
        out.append({
            "id": assignment.id, "title": assignment.title, "runtime": assignment.runtime,
            "opens_at": assignment.opens_at, "due_at": assignment.due_at,
            "max_score": max_score,
            "attempts_allowed": assignment.attempts_allowed, "accept_late": assignment.accept_late,
            "my": None if staff else _my_progress(assignment, request.user),
        })  # fmt: skip
    return out


@router.get("/assignments/{assignment_id}", response=answers({200: AssignmentOut}, 404, 422))
def assignment_get(request: HttpRequest, assignment_id: UUID) -> dict[str, Any]:
    assignment, membership = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    return _assignment_out(assignment, membership)


@router.put("/assignments/{assignment_id}", response=answers({200: AssignmentOut}, 404, 422))
def assignment_update(request: HttpRequest, assignment_id: UUID, payload: AssignmentIn) -> dict[str, Any]:
    assignment, membership = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_save(course=assignment.course, data=_assignment_data(payload), assignment=assignment)
    return _assignment_out(assignment, membership)


@router.delete("/assignments/{assignment_id}", response=answers({204: None}, 404, 422))
def assignment_delete(request: HttpRequest, assignment_id: UUID) -> Status[Any]:
    assignment, _ = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_delete(assignment=assignment)
    return Status(204, None)


@router.post("/assignments/{assignment_id}/regrade", response=answers({200: RegradeOut}, 404, 422))
def assignment_regrade(request: HttpRequest, assignment_id: UUID) -> dict[str, Any]:
    """Grade every student's latest graded submission again, with the tests as they are now."""
    assignment, _ = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    return {"regrading": grading.regrade(assignment=assignment)}


@router.post("/assignments/{assignment_id}/try", response=answers({201: RunOut}, 404, 422, 503))
def assignment_try(request: HttpRequest, assignment_id: UUID, payload: TryIn) -> Status[Any]:
    """Run the code without submitting it: the caller's own run (GET /api/runs/{id}, its live
    output and log as any run's), with the course's datasets and the assignment's limits."""
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    user: Any = request.user
    run = grading.assignment_try(user=user, assignment=assignment, code=payload.code, stdin=payload.stdin,
                                 args=payload.args)  # fmt: skip
    return Status(201, run_out(run))


# --- submissions --------------------------------------------------------------------------


@router.post("/assignments/{assignment_id}/submissions", response=answers({201: SubmissionOut}, 404, 422))
def submission_create(request: HttpRequest, assignment_id: UUID, payload: SubmissionIn) -> Status[Any]:
    assignment, membership = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    submission = grading.submission_create(user=request.user, assignment=assignment, code=payload.code)  # type: ignore[arg-type]
    numbers = _attempt_numbers(course_selectors.submissions_of(assignment=assignment, student=request.user))
    full = _submission_out(submission, staff=is_staff(membership), attempt=numbers.get(submission.id), full=True)
    return Status(201, full)


@router.get("/assignments/{assignment_id}/submissions", response=answers({200: list[SubmissionSummaryOut]}, 404, 422))
def submission_list(request: HttpRequest, assignment_id: UUID, student: str | None = None) -> list[dict[str, Any]]:
    """A student's own submissions; for staff everyone's (or one student's, by username)."""
    assignment, membership = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    staff = is_staff(membership)
    found = course_selectors.submissions_shown(
        assignment=assignment, viewer=request.user, staff=staff, student=student, limit=1000
    )
    numbers = _attempt_numbers(found)
    return [_submission_out(s, staff=staff, attempt=numbers.get(s.id), full=False) for s in found]


@router.get("/submissions/{submission_id}", response=answers({200: SubmissionOut}, 404, 422))
def submission_get(request: HttpRequest, submission_id: UUID) -> dict[str, Any]:
    submission, membership = course_selectors.submission_for_viewer(user=request.user, submission_id=submission_id)
    staff = is_staff(membership)
    # The page polls this while grading runs: recorded once per staff member per window, as a run's
    # polled record is (the page's own load is recorded every time).
    if submission.student_id != request.user.pk and not staff_access_recorded_since(
        viewer=request.user, what="submission", detail=str(submission.id), within=STAFF_POLL_RECORD_WINDOW
    ):
        record_staff_access(
            viewer=request.user, owner=submission.student, what="submission", detail=str(submission.id),
            path=request.get_full_path(),
        )  # fmt: skip
    siblings = course_selectors.attempts_beside(submission)
    return _submission_out(submission, staff=staff, attempt=_attempt_numbers(siblings).get(submission.id), full=True)


# --- gradebook ----------------------------------------------------------------------------


@router.get("/courses/{course_id}/gradebook", response=answers({200: GradebookOut}, 404, 422))
def gradebook(request: HttpRequest, course_id: UUID) -> dict[str, Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    return course_selectors.gradebook(course)


@router.get(
    "/courses/{course_id}/gradebook.csv", response=answers({200: None}, 404, 422),
    openapi_extra={"responses": {200: {"description": "one row per student, a column per assignment",
                                       "content": {"text/csv": {}}}}},
)  # fmt: skip
def gradebook_csv(request: HttpRequest, course_id: UUID) -> HttpResponse:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    book = course_selectors.gradebook(course)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["student", *[csv_cell(f"{a['title']} (/{a['max_score']:g})") for a in book["assignments"]]])
    for row in book["students"]:
        scores = ["" if c is None or c["score"] is None else f"{c['score']:g}" for c in row["cells"]]
        writer.writerow([csv_cell(row["username"]), *scores])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, f"gradebook-{course.id}.csv") or ""
    return response
