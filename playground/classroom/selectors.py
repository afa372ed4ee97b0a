"""Courses as their members see them: who may see what. A course, its assignments, datasets and
submissions exist only for its members (404 for anyone else, as if they did not exist); staff
(instructors and assistants) see everyone's work in it, a student only their own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from playground.models import (
    STAFF_ROLES,
    Assignment,
    AssignmentTest,
    Course,
    CourseInvitation,
    Dataset,
    Extension,
    LateDaySpend,
    Membership,
    Role,
    ScoreAdjustment,
    SimilarityReport,
    Submission,
    SubmissionState,
    TestResult,
)


def may_create_courses(user: Any) -> bool:
    """CORDON_COURSE_CREATORS: any account, or only instructors (the add_course permission, which
    superusers have and single sign-on's instructor group carries)."""
    return settings.CORDON_COURSE_CREATORS == "everyone" or user.has_perm("playground.add_course")


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


def due_for(assignment: Assignment, student: Any) -> datetime | None:
    """The student's due time: their extension's, else the assignment's."""
    extension = Extension.objects.filter(assignment=assignment, student=student).values_list("due_at", flat=True)
    return extension.first() or assignment.due_at


def details_open_at(assignment: Assignment, student: Any) -> datetime | None:
    """When an after_due test's details are shown to the student: once their own due time (with an
    extension) and every late day they could still spend on it have passed."""
    due = due_for(assignment, student)
    course = assignment.course
    if due is not None and course.late_days and course.late_days_per_assignment:
        due += timedelta(days=course.late_days_per_assignment)
    return due


@dataclass(frozen=True)
class LateDays:
    """A student's late days in a course: how many the course gives, how many they spent where."""

    allowed: int
    per_assignment: int
    spent: dict[Any, int]  # assignment id -> days

    @property
    def used(self) -> int:
        return sum(self.spent.values())

    @property
    def left(self) -> int:
        return max(0, self.allowed - self.used)

    def on(self, assignment_id: Any) -> int:
        return self.spent.get(assignment_id, 0)


def late_day_standing(course: Course, student: Any) -> LateDays:
    spent = LateDaySpend.objects.filter(course=course, student=student).values_list("assignment_id", "days")
    return LateDays(course.late_days, course.late_days_per_assignment, dict(spent))


def assignments_for_member(*, course: Course, membership: Membership) -> QuerySet[Assignment]:
    """Staff see every assignment, drafts too; a student the published ones that have opened."""
    assignments = Assignment.objects.filter(course=course)
    if not is_staff(membership):
        assignments = assignments.exclude(opens_at__gt=timezone.now()).exclude(published_at=None)
    return assignments


def student_sees(assignment: Assignment) -> bool:
    """Whether a student may see the assignment at all: published, and open."""
    return assignment.published_at is not None and assignment_is_open(assignment)


def assignment_for_member(
    *, user: Any, assignment_id: Any, staff: bool = False, instructor: bool = False
) -> tuple[Assignment, Membership]:
    """The assignment for a member of its course (a student: once it is published and has opened);
    with `staff` or `instructor`, only for those; 404 for anyone else."""
    assignment = Assignment.objects.filter(id=assignment_id).select_related("course").first()
    membership = None if assignment is None else membership_of(user, assignment.course_id)
    if assignment is None or membership is None:
        raise Http404("no such assignment")
    if instructor and membership.role != Role.INSTRUCTOR:
        raise Http404("no such assignment")
    if (staff or not student_sees(assignment)) and not is_staff(membership):
        raise Http404("no such assignment")
    return assignment, membership


def submission_for_viewer(*, user: Any, submission_id: Any) -> tuple[Submission, Membership]:
    """The submission for its student or for its course's staff; 404 for anyone else."""
    submission = Submission.objects.filter(id=submission_id).select_related("assignment__course", "student").first()
    membership = None if submission is None else membership_of(user, submission.assignment.course_id)
    if submission is None or membership is None:
        raise Http404("no such submission")
    if (submission.student_id != user.pk or not student_sees(submission.assignment)) and not is_staff(membership):
        raise Http404("no such submission")
    return submission, membership


def course_dataset_for_member(*, user: Any, course_id: Any, dataset_id: Any) -> Dataset:
    course, membership = course_for_member(user=user, course_id=course_id)
    dataset = datasets_for_member(course, membership).filter(id=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


def datasets_for_member(course: Course, membership: Membership) -> QuerySet[Dataset]:
    """The course's datasets as they are now (a replaced one: its replacement only). A student does
    not see one that only draft or unopened assignments use: it is part of what they would reveal."""
    datasets = Dataset.objects.filter(course=course, replaced_at=None)
    if is_staff(membership):
        return datasets
    unseen = Assignment.objects.filter(course=course).filter(Q(published_at=None) | Q(opens_at__gt=timezone.now()))
    seen = assignments_for_member(course=course, membership=membership)
    hidden = Dataset.objects.filter(assignments__in=unseen).exclude(assignments__in=seen)
    return datasets.exclude(id__in=hidden.values("id"))


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


def gradebook(course: Course, *, per_test: bool = False) -> dict[str, Any]:
    """Students x assignments: each student's latest graded submission (else their latest one), its
    final score (the tests' and the staff's adjustments); with `per_test`, each test's points too."""
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
    test_scores: dict[Any, dict[str, float | None]] = {}
    if per_test:
        found = TestResult.objects.filter(submission_id__in=[s.id for s in latest.values()])
        for submission_id, name, score in found.values_list("submission_id", "name", "score"):
            test_scores.setdefault(submission_id, {})[name] = score
    rows = []
    for member in students:
        cells: list[dict[str, Any] | None] = []
        for assignment in assignments:
            found_ = latest.get((member.user_id, assignment.id))
            cells.append(None if found_ is None else {
                "assignment_id": assignment.id, "score": found_.final_score, "tests_score": found_.score,
                "adjustment": found_.adjustment, "state": found_.state,
                "attempts": attempts.get((member.user_id, assignment.id), 0), "late": found_.late,
                "late_days": found_.late_days, "submission_id": found_.id,
                "tests": test_scores.get(found_.id) if per_test else None,
            })  # fmt: skip
        rows.append({"username": member.user.get_username(), "cells": cells})
    names: dict[Any, list[dict[str, Any]]] = {}
    if per_test:
        for assignment_id, name, points in AssignmentTest.objects.filter(assignment__in=assignments).values_list(
            "assignment_id", "name", "points"
        ):
            names.setdefault(assignment_id, []).append({"name": name, "points": points})
    return {
        "assignments": [
            {"id": a.id, "title": a.title, "max_score": max_score, "published": a.published_at is not None,
             "tests": names.get(a.id, [])}
            for a, max_score in scored
        ],
        "students": rows,
    }  # fmt: skip


def student_record(course: Course, student: Any) -> dict[str, Any]:
    """One student's every attempt at every assignment of the course, oldest first, with the due
    time that applies to them and their late days."""
    standing = late_day_standing(course, student)
    extensions = dict(
        Extension.objects.filter(assignment__course=course, student=student).values_list("assignment_id", "due_at")
    )
    by_assignment: dict[Any, list[Submission]] = {}
    mine = Submission.objects.filter(assignment__course=course, student=student).defer("code").order_by("created_at")
    for submission in mine:
        by_assignment.setdefault(submission.assignment_id, []).append(submission)
    assignments = []
    for assignment, max_score in assignments_with_max_score(course.assignments.all()):
        submissions = by_assignment.get(assignment.id, [])
        counted = 0
        attempts = []
        for s in submissions:
            counted += 1 if s.counted else 0
            attempts.append({
                "id": s.id, "attempt": counted if s.counted else None, "created_at": s.created_at,
                "state": s.state, "score": s.score, "final_score": s.final_score, "late": s.late,
                "late_days": s.late_days,
            })  # fmt: skip
        assignments.append({
            "id": assignment.id, "title": assignment.title, "max_score": max_score,
            "published": assignment.published_at is not None,
            "due_at": extensions.get(assignment.id, assignment.due_at), "extended": assignment.id in extensions,
            "late_days": standing.on(assignment.id), "attempts": attempts,
        })  # fmt: skip
    return {
        "username": student.get_username(),
        "late_days": {"allowed": standing.allowed, "used": standing.used, "left": standing.left},
        "assignments": assignments,
    }


def extensions_of(assignment: Assignment) -> QuerySet[Extension]:
    return assignment.extensions.select_related("student", "granted_by").order_by("student__username")


def submission_for_staff(*, user: Any, submission_id: Any) -> Submission:
    """The submission for its course's staff; 404 for anyone else (its own student too)."""
    submission, membership = submission_for_viewer(user=user, submission_id=submission_id)
    if not is_staff(membership):
        raise Http404("no such submission")
    return submission


def invitation_for_user(*, user: Any, invitation_id: Any) -> CourseInvitation | None:
    """One of the open invitations `user` may accept, or None."""
    return invitations_for_user(user=user).filter(id=invitation_id).first()


def adjustment_of(submission: Submission, adjustment_id: Any) -> ScoreAdjustment:
    """One adjustment of a submission (the caller checked its staff); 404 if it has none by that id."""
    adjustment = submission.adjustments.filter(id=adjustment_id).first()
    if adjustment is None:
        raise Http404("no such adjustment")
    return adjustment


def similarity_report_for_staff(*, user: Any, report_id: Any) -> SimilarityReport:
    """A similarity report, for the staff of its assignment's course; 404 for anyone else."""
    report = SimilarityReport.objects.select_related("assignment", "requested_by").filter(id=report_id).first()
    if report is None:
        raise Http404("no such report")
    assignment_for_member(user=user, assignment_id=report.assignment_id, staff=True)
    return report


def similarity_reports_recent(assignment: Assignment, count: int = 10) -> list[SimilarityReport]:
    """The assignment's newest reports, newest first."""
    return list(assignment.similarity_reports.select_related("requested_by")[:count])


def submission_owners(submission_ids: list[Any]) -> list[User]:
    """The students who made these submissions."""
    return list(User.objects.filter(submissions__id__in=submission_ids).distinct())
