"""Courses as their members see them: who may see what. A course, its assignments, datasets and
submissions exist only for its members (404 for anyone else, as if they did not exist); staff
(instructors and assistants) see everyone's work in it, a student only their own."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from playground.models import (
    STAFF_ROLES,
    Assignment,
    Course,
    CourseInvitation,
    Dataset,
    Membership,
    Role,
    Submission,
    SubmissionState,
)


def is_staff(membership: Membership | None) -> bool:
    return membership is not None and membership.role in STAFF_ROLES


def membership_of(user: Any, course: Course | Any) -> Membership | None:
    if not getattr(user, "is_authenticated", False):
        return None
    course_id: Any = getattr(course, "pk", course)
    return Membership.objects.filter(user=user, course_id=course_id).first()


def course_by_join_code(code: str) -> Course | None:
    """The course a join code (as typed: any case, spaces around) opens; None for no such code."""
    code = (code or "").strip().upper()
    return Course.objects.filter(join_code=code).first() if code else None


def course_list_for_user(*, user: Any) -> QuerySet[Course]:
    return Course.objects.filter(memberships__user=user).distinct()


def course_for_member(*, user: Any, course_id: Any) -> tuple[Course, Membership]:
    membership = Membership.objects.filter(user=user, course_id=course_id).select_related("course").first()
    if membership is None or not getattr(user, "is_authenticated", False):
        raise Http404("no such course")
    return membership.course, membership


def course_for_staff(*, user: Any, course_id: Any, instructor: bool = False) -> tuple[Course, Membership]:
    """The course for its staff (instructors only when `instructor`); 404 for a student as for anyone
    else, so a staff-only endpoint does not even confirm the course to a student."""
    course, membership = course_for_member(user=user, course_id=course_id)
    allowed = (Role.INSTRUCTOR,) if instructor else STAFF_ROLES
    if membership.role not in allowed:
        raise Http404("no such course")
    return course, membership


def assignment_is_open(assignment: Assignment) -> bool:
    return assignment.opens_at is None or assignment.opens_at <= timezone.now()


def assignment_past_due(assignment: Assignment) -> bool:
    return assignment.due_at is not None and assignment.due_at <= timezone.now()


def assignments_for_member(*, course: Course, membership: Membership) -> QuerySet[Assignment]:
    assignments = Assignment.objects.filter(course=course)
    if not is_staff(membership):
        now = timezone.now()
        assignments = assignments.exclude(opens_at__gt=now)
    return assignments


def assignment_for_member(
    *, user: Any, assignment_id: Any, staff: bool = False, instructor: bool = False
) -> tuple[Assignment, Membership]:
    """The assignment for a member of its course (a student: once it has opened); with `staff` or
    `instructor`, only for those; 404 for anyone else."""
    assignment = Assignment.objects.filter(id=assignment_id).select_related("course").first()
    membership = None if assignment is None else membership_of(user, assignment.course_id)
    if assignment is None or membership is None:
        raise Http404("no such assignment")
    if instructor and membership.role != Role.INSTRUCTOR:
        raise Http404("no such assignment")
    if (staff or not assignment_is_open(assignment)) and not is_staff(membership):
        raise Http404("no such assignment")
    return assignment, membership


def submission_for_viewer(*, user: Any, submission_id: Any) -> tuple[Submission, Membership]:
    """The submission for its student or for its course's staff; 404 for anyone else."""
    submission = Submission.objects.filter(id=submission_id).select_related("assignment__course", "student").first()
    membership = None if submission is None else membership_of(user, submission.assignment.course_id)
    if submission is None or membership is None:
        raise Http404("no such submission")
    if submission.student_id != user.pk and not is_staff(membership):
        raise Http404("no such submission")
    return submission, membership


def course_dataset_for_member(*, user: Any, course_id: Any, dataset_id: Any) -> Dataset:
    course_for_member(user=user, course_id=course_id)
    dataset = Dataset.objects.filter(course_id=course_id, replaced_at=None, id=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


def invitations_for_user(*, user: Any) -> QuerySet[CourseInvitation]:
    """Pending invitations that name the user (their username, or their email address). An
    identifier with an @ is an email address and names only the account with that email: anyone
    may sign up with an email-shaped username, and must not take an invitation meant for it."""
    username = user.get_username().lower()
    names = [] if "@" in username else [username]
    if user.email:
        names.append(user.email.lower())
    pending = CourseInvitation.objects.filter(identifier__in=names, accepted_at=None).select_related("course")
    return pending.exclude(course__memberships__user=user)


# --- the classroom API's reads ---------------------------------------------------------------

# What lists of assignments do not show, and do not read: each can be 64 to 256 KiB.
ASSIGNMENT_TEXTS = ("instructions", "instructions_html", "starter_code")


def memberships_of(*, user: Any) -> QuerySet[Membership]:
    """A user's memberships with their courses, newest course first."""
    return Membership.objects.filter(user=user).select_related("course").order_by("-course__created_at")


def members(course: Course) -> QuerySet[Membership]:
    return course.memberships.select_related("user", "course")


def member(course: Course, username: str) -> Membership | None:
    return course.memberships.select_related("user", "course").filter(user__username=username).first()


def invitations_of(course: Course) -> QuerySet[CourseInvitation]:
    return course.invitations.select_related("accepted_by")


def course_datasets(course: Course) -> QuerySet[Dataset]:
    """The course's datasets as they are now (a replaced one: its replacement only)."""
    return Dataset.objects.filter(course=course, replaced_at=None)


def submissions_of(*, assignment: Assignment, student: Any) -> list[Submission]:
    """A student's submissions to an assignment, newest first, without their code."""
    found = Submission.objects.filter(assignment=assignment, student=student).defer("code")
    return list(found.order_by("-created_at"))


def submissions_shown(
    *, assignment: Assignment, viewer: Any, staff: bool, student: str | None = None, limit: int = 1000
) -> list[Submission]:
    """The submissions a viewer may list: a student's own; for staff everyone's (or one student's,
    by username). Without their code, at most `limit`."""
    submissions = assignment.submissions.select_related("student").defer("code")
    if not staff:
        submissions = submissions.filter(student=viewer)
    elif student:
        submissions = submissions.filter(student__username=student)
    return list(submissions[:limit])


def attempts_beside(submission: Submission) -> list[Submission]:
    """Every submission of the same student to the same assignment, with what numbers attempts."""
    found = Submission.objects.filter(assignment_id=submission.assignment_id, student=submission.student)
    return list(found.only("id", "created_at", "charged", "student_id"))


def assignments_with_max_score(assignments: QuerySet[Assignment]) -> list[tuple[Assignment, float]]:
    """Each without its texts, with its tests' points summed by the database (a GROUP BY query,
    which Meta.ordering does not order: ordered here)."""
    summed: Any = assignments.defer(*ASSIGNMENT_TEXTS).annotate(max_score=Sum("tests__points"))
    return [(a, float(a.max_score or 0.0)) for a in summed.order_by("due_at", "created_at")]


def gradebook(course: Course) -> dict[str, Any]:
    """Students x assignments: each student's latest graded submission (else their latest one)."""
    scored = assignments_with_max_score(course.assignments.all())
    assignments = [assignment for assignment, _ in scored]
    students = list(course.memberships.filter(role=Role.STUDENT).select_related("user").order_by("user__username"))
    latest: dict[tuple[int, Any], Submission] = {}
    attempts: dict[tuple[int, Any], int] = {}
    for submission in Submission.objects.filter(assignment__course=course).defer("code").order_by("created_at"):
        key = (submission.student_id, submission.assignment_id)
        if submission.counted:
            attempts[key] = attempts.get(key, 0) + 1
        current = latest.get(key)
        if current is None or submission.state == SubmissionState.GRADED or current.state != SubmissionState.GRADED:
            latest[key] = submission
    rows = []
    for member in students:
        cells: list[dict[str, Any] | None] = []
        for assignment in assignments:
            found = latest.get((member.user_id, assignment.id))
            cells.append(None if found is None else {
                "assignment_id": assignment.id, "score": found.score, "state": found.state,
                "attempts": attempts.get((member.user_id, assignment.id), 0), "late": found.late,
                "submission_id": found.id,
            })  # fmt: skip
        rows.append({"username": member.user.get_username(), "cells": cells})
    return {
        "assignments": [{"id": a.id, "title": a.title, "max_score": max_score} for a, max_score in scored],
        "students": rows,
    }  # fmt: skip
