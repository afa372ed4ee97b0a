"""Courses as their members see them: who may see what. A course, its assignments, datasets and
submissions exist only for its members (404 for anyone else, as if they did not exist); staff
(instructors and assistants) see everyone's work in it, a student only their own."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
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
