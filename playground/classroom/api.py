"""The classroom's API (a router, mounted under /api by urls.py): courses, members, roster imports,
course datasets, assignments with their tests, submissions and the gradebook. Thin, like the rest
of the API: access through selectors.py (404 for whoever may not see a thing), writes through
courses.py and grading.py; bodies and answers declared in schemas.py, every answer shaped for its
viewer in shapes.py (what a student may see of a test or a result)."""

from __future__ import annotations

import csv
import io
from typing import Any
from uuid import UUID

from django.http import Http404, HttpRequest, HttpResponse
from django.utils.http import content_disposition_header
from ninja import File, Router, Status
from ninja.files import UploadedFile
from ninja.params.functions import Query

from playground import throttle
from playground.api.datasets import REPLACE_DOC
from playground.api.schemas import DatasetOut, RunOut, answers, run_out, uploaded_file
from playground.classroom import adjustments, grading, similarity_reports
from playground.classroom import courses as course_services
from playground.classroom import selectors as course_selectors
from playground.classroom.schemas import (
    AdjustmentIn,
    AdjustmentOut,
    AssignmentIn,
    AssignmentOut,
    AssignmentSummaryOut,
    CourseDatasetOut,
    CourseIn,
    CourseInvitationOut,
    CourseOut,
    CoursePatchIn,
    ExtensionIn,
    ExtensionOut,
    GradebookOut,
    JoinCodeIn,
    JoinIn,
    MembershipOut,
    MyInvitationOut,
    PublicationOut,
    PublishIn,
    RegradeOut,
    RoleIn,
    RosterOut,
    RubricIn,
    RubricItemOut,
    SimilarityIn,
    SimilarityPairOut,
    SimilarityReportOut,
    StudentRecordOut,
    SubmissionIn,
    SubmissionOut,
    SubmissionSummaryOut,
    TryIn,
)
from playground.classroom.selectors import is_staff, may_create_courses
from playground.classroom.shapes import (
    adjustment_out,
    assignment_out,
    attempt_numbers,
    course_out,
    membership_out,
    my_progress,
    submission_out,
)
from playground.csvcells import csv_cell
from playground.errors import ServiceError
from playground.limits import limits_set
from playground.models import (
    Course,
    Dataset,
    Extension,
    Membership,
    Role,
)
from playground.services import datasets as dataset_services
from playground.services.audit import record_staff_access
from playground.signed_in import signed_in
from playground.uploads import check_upload_size

router = Router(tags=["courses"])
ROSTER_MAX_BYTES = 1 << 20


def _assignment_data(payload: AssignmentIn) -> dict[str, Any]:
    data = payload.model_dump()
    data.pop("publish")  # published by the endpoint, which knows who publishes
    data["limits"] = limits_set(payload.limits)  # only those set: the others take their defaults when it runs
    data["opens_at"] = course_services.parse_when(payload.opens_at)
    data["due_at"] = course_services.parse_when(payload.due_at)
    return data


# --- courses ------------------------------------------------------------------------------


@router.post("/courses", response=answers({201: CourseOut}, 403, 422))
def course_create(request: HttpRequest, payload: CourseIn) -> Status[Any]:
    if not may_create_courses(request.user):
        raise ServiceError("not_an_instructor", "only instructors may create courses on this site", status=403)
    policy = payload.model_dump(exclude={"title"}, exclude_none=True, exclude_unset=True)
    course = course_services.course_create(user=signed_in(request), title=payload.title, policy=policy)
    _, membership = course_selectors.course_for_member(user=request.user, course_id=course.id)
    return Status(201, course_out(course, membership))


@router.get("/courses", response=answers({200: list[CourseOut]}))
def course_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [course_out(m.course, m) for m in course_selectors.memberships_of(user=request.user)]


@router.post("/courses/join", response=answers({201: MembershipOut}, 404, 422))
def course_join(request: HttpRequest, payload: JoinIn) -> Status[Any]:
    wait_s = throttle.join_wait_s(request)
    if wait_s is not None:  # before the code is looked up: a right one is refused too
        raise ServiceError("throttled", throttle.join_refusal(wait_s), status=429, retry_after_s=wait_s)
    try:
        membership = course_services.course_join(user=signed_in(request), join_code=payload.join_code)
    except ServiceError as exc:
        if exc.code == "invalid_join_code":
            throttle.join_failed(request)
        raise
    return Status(201, membership_out(membership, staff_view=False))


@router.get("/courses/{course_id}", response=answers({200: CourseOut}, 404, 422))
def course_get(request: HttpRequest, course_id: UUID) -> dict[str, Any]:
    course, membership = course_selectors.course_for_member(user=request.user, course_id=course_id)
    return course_out(course, membership)


@router.patch("/courses/{course_id}", response=answers({200: CourseOut}, 404, 422))
def course_update(request: HttpRequest, course_id: UUID, payload: CoursePatchIn) -> dict[str, Any]:
    course, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    # A field left out or null is left as it is (an empty list or object clears a ceiling).
    course_services.course_update(course=course, changes=payload.model_dump(exclude_unset=True, exclude_none=True))
    return course_out(course, membership)


@router.post("/courses/{course_id}/join-code", response=answers({200: CourseOut}, 404, 422))
def course_join_code(request: HttpRequest, course_id: UUID, payload: JoinCodeIn) -> dict[str, Any]:
    course, membership = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    return course_out(course_services.course_join_code(course=course, action=payload.action), membership)


@router.get("/courses/{course_id}/members", response=answers({200: list[MembershipOut]}, 404, 422))
def member_list(request: HttpRequest, course_id: UUID) -> list[dict[str, Any]]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    return [membership_out(m, staff_view=True) for m in course_selectors.members(course)]


def _member(course: Course, username: str) -> Membership:
    membership = course_selectors.member(course, username)
    if membership is None:
        raise Http404("no such member")
    return membership


@router.patch("/courses/{course_id}/members/{username}", response=answers({200: MembershipOut}, 404, 409, 422))
def member_update(request: HttpRequest, course_id: UUID, username: str, payload: RoleIn) -> dict[str, Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id, instructor=True)
    membership = course_services.member_set_role(course=course, membership=_member(course, username), role=payload.role)
    return membership_out(membership, staff_view=True)


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
    check_upload_size(upload, ROSTER_MAX_BYTES, "the roster")
    return course_services.roster_import(course=course, by=signed_in(request), data=upload.read())


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
    invitation = course_selectors.invitation_for_user(user=request.user, invitation_id=invitation_id)
    if invitation is None:
        raise ServiceError("not_found", "no such invitation for you", status=404)
    membership = course_services.invitation_accept(user=signed_in(request), invitation=invitation)
    return Status(201, membership_out(membership, staff_view=False))


# --- course datasets ----------------------------------------------------------------------


@router.get("/courses/{course_id}/datasets", response=answers({200: list[CourseDatasetOut]}, 404, 422))
def course_dataset_list(request: HttpRequest, course_id: UUID) -> Any:
    course, membership = course_selectors.course_for_member(user=request.user, course_id=course_id)
    return [
        {**DatasetOut.model_validate(d).model_dump(), "can_delete": _may_delete(membership, d, request.user)}
        for d in course_selectors.datasets_for_member(course, membership)
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
    made = dataset_services.dataset_create(user=signed_in(request), upload=upload, course=course, replace=replace)
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
    if payload.publish:
        course_services.assignment_publish(assignment=assignment, by=signed_in(request), confirm=True)
    return Status(201, assignment_out(assignment, membership))


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
            "published": assignment.published_at is not None,
            "my": None if staff else my_progress(assignment, request.user),
        })  # fmt: skip
    return out


@router.get("/assignments/{assignment_id}", response=answers({200: AssignmentOut}, 404, 422))
def assignment_get(request: HttpRequest, assignment_id: UUID) -> dict[str, Any]:
    assignment, membership = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    return assignment_out(assignment, membership)


@router.put("/assignments/{assignment_id}", response=answers({200: AssignmentOut}, 404, 422))
def assignment_update(request: HttpRequest, assignment_id: UUID, payload: AssignmentIn) -> dict[str, Any]:
    assignment, membership = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_save(course=assignment.course, data=_assignment_data(payload), assignment=assignment)
    if payload.publish:
        course_services.assignment_publish(assignment=assignment, by=signed_in(request), confirm=True)
    return assignment_out(assignment, membership)


@router.delete("/assignments/{assignment_id}", response=answers({204: None}, 404, 422))
def assignment_delete(request: HttpRequest, assignment_id: UUID) -> Status[Any]:
    assignment, _ = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_delete(assignment=assignment)
    return Status(204, None)


@router.post("/assignments/{assignment_id}/regrade", response=answers({200: RegradeOut}, 404, 409, 422))
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
    submission = grading.submission_create(user=signed_in(request), assignment=assignment, code=payload.code)
    numbers = attempt_numbers(course_selectors.submissions_of(assignment=assignment, student=request.user))
    full = submission_out(submission, staff=is_staff(membership), attempt=numbers.get(submission.id), full=True)
    return Status(201, full)


@router.get("/assignments/{assignment_id}/submissions", response=answers({200: list[SubmissionSummaryOut]}, 404, 422))
def submission_list(request: HttpRequest, assignment_id: UUID, student: str | None = None) -> list[dict[str, Any]]:
    """A student's own submissions; for staff everyone's (or one student's, by username)."""
    assignment, membership = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id)
    staff = is_staff(membership)
    found = course_selectors.submissions_shown(
        assignment=assignment, viewer=request.user, staff=staff, student=student, limit=1000
    )
    numbers = attempt_numbers(found)
    return [submission_out(s, staff=staff, attempt=numbers.get(s.id), full=False) for s in found]


@router.get("/submissions/{submission_id}", response=answers({200: SubmissionOut}, 404, 422))
def submission_get(request: HttpRequest, submission_id: UUID) -> dict[str, Any]:
    submission, membership = course_selectors.submission_for_viewer(user=request.user, submission_id=submission_id)
    staff = is_staff(membership)
    # The page polls this while grading runs: a polled read, as a run's record is.
    record_staff_access(
        viewer=request.user, owner=submission.student, what="submission", detail=str(submission.id),
        path=request.get_full_path(), polled=True,
    )  # fmt: skip
    siblings = course_selectors.attempts_beside(submission)
    return submission_out(submission, staff=staff, attempt=attempt_numbers(siblings).get(submission.id), full=True)


# --- gradebook ----------------------------------------------------------------------------


@router.get("/courses/{course_id}/gradebook", response=answers({200: GradebookOut}, 404, 422))
def gradebook(request: HttpRequest, course_id: UUID) -> dict[str, Any]:
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    return course_selectors.gradebook(course)


@router.get(
    "/courses/{course_id}/gradebook.csv", response=answers({200: None}, 404, 422),
    openapi_extra={"responses": {200: {"description": "one row per student, a column per assignment (with "
                                       "tests=true: then a column per test and one for the adjustments)",
                                       "content": {"text/csv": {}}}}},
)  # fmt: skip
def gradebook_csv(request: HttpRequest, course_id: UUID, tests: bool = False) -> HttpResponse:
    """Each student's final score per assignment; with `tests`, each test's points and the staff's
    adjustments beside it (of the same submission: the latest graded one)."""
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    book = course_selectors.gradebook(course, per_test=tests)
    out = io.StringIO()
    writer = csv.writer(out)
    header = ["student"]
    for a in book["assignments"]:
        header.append(f"{a['title']} (/{a['max_score']:g})")
        if tests:
            header += [f"{a['title']}: {t['name']} (/{t['points']:g})" for t in a["tests"]]
            header.append(f"{a['title']}: adjustment")
    writer.writerow([csv_cell(h) for h in header])
    for row in book["students"]:
        line = [csv_cell(row["username"])]
        for assignment, cell in zip(book["assignments"], row["cells"], strict=True):
            line.append(_number(cell and cell["score"]))
            if tests:
                scores = (cell or {}).get("tests") or {}
                line += [_number(scores.get(t["name"])) for t in assignment["tests"]]
                line.append(_number(cell and cell["adjustment"]))
        writer.writerow(line)
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    name = f"gradebook-{course.id}{'-tests' if tests else ''}.csv"
    response["Content-Disposition"] = content_disposition_header(True, name) or ""
    return response


def _number(value: Any) -> str:
    return "" if value is None else f"{value:g}"


@router.get("/courses/{course_id}/students/{username}", response=answers({200: StudentRecordOut}, 404, 422))
def student_record(request: HttpRequest, course_id: UUID, username: str) -> dict[str, Any]:
    """One student's every attempt at every assignment, with scores over time and late days (staff;
    each view recorded in the audit console)."""
    course, _ = course_selectors.course_for_staff(user=request.user, course_id=course_id)
    member = _member(course, username)
    if member.role != Role.STUDENT:
        raise Http404("no such student")
    record_staff_access(viewer=request.user, owner=member.user, what="student record", detail=str(course.id),
                        path=request.get_full_path())  # fmt: skip
    return course_selectors.student_record(course, member.user)


# --- drafts and publishing ----------------------------------------------------------------


@router.get("/assignments/{assignment_id}/publication", response=answers({200: PublicationOut}, 404, 422))
def assignment_publication(request: HttpRequest, assignment_id: UUID) -> dict[str, Any]:
    """What students will see once it is published: read before POST .../publish."""
    assignment, _ = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    return course_services.publication(assignment)


@router.post("/assignments/{assignment_id}/publish", response=answers({200: AssignmentOut}, 404, 422))
def assignment_publish(request: HttpRequest, assignment_id: UUID, payload: PublishIn) -> dict[str, Any]:
    assignment, membership = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_publish(assignment=assignment, by=signed_in(request), confirm=payload.confirm)
    return assignment_out(assignment, membership)


@router.post("/assignments/{assignment_id}/unpublish", response=answers({200: AssignmentOut}, 404, 409, 422))
def assignment_unpublish(request: HttpRequest, assignment_id: UUID) -> dict[str, Any]:
    """Back to a draft, while no student has submitted to it."""
    assignment, membership = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    course_services.assignment_unpublish(assignment=assignment)
    return assignment_out(assignment, membership)


# --- extensions -----------------------------------------------------------------------------


def _extension_out(extension: Extension) -> dict[str, Any]:
    return {
        "student": extension.student.get_username(), "due_at": extension.due_at, "reason": extension.reason,
        "granted_by": extension.granted_by.get_username() if extension.granted_by else None,
        "granted_at": extension.granted_at,
    }  # fmt: skip


@router.get("/assignments/{assignment_id}/extensions", response=answers({200: list[ExtensionOut]}, 404, 422))
def extension_list(request: HttpRequest, assignment_id: UUID) -> list[dict[str, Any]]:
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id, staff=True)
    return [_extension_out(e) for e in course_selectors.extensions_of(assignment)]


@router.put("/assignments/{assignment_id}/extensions", response=answers({200: ExtensionOut}, 404, 422))
def extension_set(request: HttpRequest, assignment_id: UUID, payload: ExtensionIn) -> dict[str, Any]:
    """Give one student their own due time (replacing an earlier extension of theirs)."""
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id, staff=True)
    member = _member(assignment.course, payload.student)
    due_at = course_services.parse_when(payload.due_at)
    if due_at is None:
        raise ServiceError("invalid_date", "due_at is needed", field="due_at", status=422)
    extension = course_services.extension_set(
        assignment=assignment, student=member.user, due_at=due_at, reason=payload.reason, by=signed_in(request),
    )  # fmt: skip
    return _extension_out(extension)


@router.delete("/assignments/{assignment_id}/extensions/{username}", response=answers({204: None}, 404, 422))
def extension_remove(request: HttpRequest, assignment_id: UUID, username: str) -> Status[Any]:
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id, staff=True)
    course_services.extension_remove(assignment=assignment, student=_member(assignment.course, username).user)
    return Status(204, None)


# --- manual grading -------------------------------------------------------------------------


@router.put("/assignments/{assignment_id}/rubric", response=answers({200: list[RubricItemOut]}, 404, 422))
def rubric_save(request: HttpRequest, assignment_id: UUID, payload: RubricIn) -> list[dict[str, Any]]:
    """The assignment's reusable adjustments (label and points), replacing the earlier ones."""
    assignment, _ = course_selectors.assignment_for_member(
        user=request.user, assignment_id=assignment_id, instructor=True
    )
    items = adjustments.rubric_save(assignment=assignment, items=[i.model_dump() for i in payload.items])
    return [{"id": i.id, "label": i.label, "points": i.points} for i in items]


@router.post(
    "/submissions/{submission_id}/adjustments", response=answers({201: AdjustmentOut}, 404, 409, 422)
)  # fmt: skip
def adjustment_add(request: HttpRequest, submission_id: UUID, payload: AdjustmentIn) -> Status[Any]:
    """Add points to a graded submission (negative: take them), with a comment or a rubric item."""
    submission = course_selectors.submission_for_staff(user=request.user, submission_id=submission_id)
    made = adjustments.adjustment_add(
        submission=submission, by=signed_in(request), points=payload.points, comment=payload.comment,
        rubric_item_id=payload.rubric_item_id,
    )  # fmt: skip
    return Status(201, adjustment_out(made, staff=True))


@router.delete(
    "/submissions/{submission_id}/adjustments/{adjustment_id}", response=answers({200: AdjustmentOut}, 404, 422)
)  # fmt: skip
def adjustment_withdraw(request: HttpRequest, submission_id: UUID, adjustment_id: int) -> dict[str, Any]:
    """Withdraw an adjustment: it stops counting, and stays on record with who withdrew it."""
    submission = course_selectors.submission_for_staff(user=request.user, submission_id=submission_id)
    adjustment = course_selectors.adjustment_of(submission, adjustment_id)
    return adjustment_out(adjustments.adjustment_withdraw(adjustment=adjustment, by=signed_in(request)), staff=True)


# --- similarity -----------------------------------------------------------------------------


@router.post("/assignments/{assignment_id}/similarity", response=answers({202: SimilarityReportOut}, 404, 422, 503))
def similarity_request(request: HttpRequest, assignment_id: UUID, payload: SimilarityIn) -> Status[Any]:
    """Compare every student's latest submission with every other's, in the background (the code
    is tokenised, never run; the starter code does not count). A report still being made is
    answered instead of a second one. Follow it with GET /api/similarity/{id}."""
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id, staff=True)
    report = similarity_reports.report_request(
        assignment=assignment, by=signed_in(request), threshold=payload.threshold
    )
    return Status(202, similarity_reports.report_out(report))


@router.get("/assignments/{assignment_id}/similarity", response=answers({200: list[SimilarityReportOut]}, 404, 422))
def similarity_list(request: HttpRequest, assignment_id: UUID) -> list[dict[str, Any]]:
    """The assignment's reports, newest first (at most 10)."""
    assignment, _ = course_selectors.assignment_for_member(user=request.user, assignment_id=assignment_id, staff=True)
    return [similarity_reports.report_out(r) for r in course_selectors.similarity_reports_recent(assignment)]


@router.get("/similarity/{report_id}", response=answers({200: SimilarityReportOut}, 404, 422))
def similarity_get(request: HttpRequest, report_id: UUID) -> dict[str, Any]:
    return similarity_reports.report_out(
        course_selectors.similarity_report_for_staff(user=request.user, report_id=report_id)
    )


@router.get("/similarity/{report_id}/pairs/{index}", response=answers({200: SimilarityPairOut}, 404, 422))
def similarity_pair(request: HttpRequest, report_id: UUID, index: int) -> dict[str, Any]:
    """One pair side by side: both submissions' code and the regions that match. Each read is a
    staff access to both students' work, recorded in the audit console."""
    report = course_selectors.similarity_report_for_staff(user=request.user, report_id=report_id)
    pair = similarity_reports.pair_side_by_side(report, index)
    for owner in course_selectors.submission_owners([pair["a"]["submission_id"], pair["b"]["submission_id"]]):
        record_staff_access(viewer=request.user, owner=owner, what="similarity pair",
                            detail=f"{report.id} #{index}", path=request.get_full_path())  # fmt: skip
    return pair
