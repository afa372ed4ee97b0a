"""Classroom pages: each checks that the viewer may see the course, assignment or submission (404
otherwise, as classroom/selectors.py decides) and renders a template; its script talks to the API."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from playground import throttle
from playground.classroom.courses import course_join as join_course
from playground.classroom.selectors import (
    assignment_for_member,
    course_by_join_code,
    course_for_member,
    course_for_staff,
    is_staff,
    may_create_courses,
    membership_of,
    submission_for_viewer,
)
from playground.errors import ServiceError
from playground.models import Membership, Role, SimilarityReport
from playground.services.audit import record_staff_access
from playground.signed_in import signed_in
from runner.spec import RUNTIMES


def _roles(membership: Membership) -> dict[str, Any]:
    """What a page shows its viewer: the staff parts, and the instructor's controls among them."""
    return {
        "role": membership.role,
        "is_staff": is_staff(membership),
        "is_instructor": membership.role == Role.INSTRUCTOR,
        "runtimes": ",".join(RUNTIMES),
    }


@login_required
def courses(request: HttpRequest) -> HttpResponse:
    return render(request, "classroom/list.html", {"may_create": may_create_courses(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def course_join(request: HttpRequest, code: str) -> HttpResponse:
    """A join link: the course's title and a Join button; a member is sent to the course. Wrong
    codes count against the user and the address, as on the API (playground/throttle.py)."""
    wait_s = throttle.join_wait_s(request)
    if wait_s is not None:
        return throttle.throttled_page(
            request, wait_s, heading="Too many wrong join codes",
            explanation="There have been too many join links with wrong codes from your account or address, so "
            "join links are refused for now, even with the right code.",
        )  # fmt: skip
    course = course_by_join_code(code)
    if course is None:
        throttle.join_failed(request)
        message = "This join link does not work: no course has this code (it may have been rotated or closed)."
        return render(request, "classroom/join.html", {"error": message}, status=404)
    if membership_of(request.user, course) is not None:
        return redirect("course", course_id=course.id)
    error = None
    if request.method == "POST":
        try:
            join_course(user=signed_in(request), join_code=code)
        except ServiceError as exc:
            error = exc.message
        else:
            return redirect("course", course_id=course.id)
    context = {"course": course, "code": code, "error": error}
    return render(request, "classroom/join.html", context, status=400 if error else 200)


@login_required
def course(request: HttpRequest, course_id: UUID) -> HttpResponse:
    found, membership = course_for_member(user=request.user, course_id=course_id)
    return render(request, "classroom/course.html", {"course": found, **_roles(membership)})


@login_required
def assignment_new(request: HttpRequest, course_id: UUID) -> HttpResponse:
    found, membership = course_for_staff(user=request.user, course_id=course_id, instructor=True)
    context = {"course": found, "assignment": None, **_roles(membership)}
    return render(request, "classroom/assignment_edit.html", context)


@login_required
def assignment_edit(request: HttpRequest, assignment_id: UUID) -> HttpResponse:
    found, membership = assignment_for_member(user=request.user, assignment_id=assignment_id, instructor=True)
    context = {"course": found.course, "assignment": found, **_roles(membership)}
    return render(request, "classroom/assignment_edit.html", context)


@login_required
def assignment(request: HttpRequest, assignment_id: UUID) -> HttpResponse:
    found, membership = assignment_for_member(user=request.user, assignment_id=assignment_id)
    return render(
        request, "classroom/assignment.html", {"assignment": found, "course": found.course, **_roles(membership)}
    )


@login_required
def submission(request: HttpRequest, submission_id: UUID) -> HttpResponse:
    """A submission, for its student or the course's staff (a staff view is recorded)."""
    found, membership = submission_for_viewer(user=request.user, submission_id=submission_id)
    viewed_as_staff = found.student_id != request.user.pk
    if viewed_as_staff:
        record_staff_access(
            viewer=request.user, owner=found.student, what="submission", detail=str(found.id),
            path=request.get_full_path(),
        )  # fmt: skip
    context = {
        "submission": found, "assignment": found.assignment, "course": found.assignment.course,
        "viewed_as_staff": viewed_as_staff, **_roles(membership),
    }  # fmt: skip
    return render(request, "classroom/submission.html", context)


@login_required
def student(request: HttpRequest, course_id: UUID, username: str) -> HttpResponse:
    """One student's every attempt, for the course's staff (404 for anyone else, and for a member
    who is not a student); the API's read of it is recorded in the audit console."""
    found, membership = course_for_staff(user=request.user, course_id=course_id)
    member = found.memberships.select_related("user").filter(user__username=username, role=Role.STUDENT).first()
    if member is None:
        raise Http404("no such student")
    return render(request, "classroom/student.html", {"course": found, "student": member.user, **_roles(membership)})


@login_required
def similarity_pair(request: HttpRequest, report_id: UUID, index: int) -> HttpResponse:
    """A pair of a similarity report side by side, for the course's staff (404 for anyone else)."""
    report = SimilarityReport.objects.filter(id=report_id).first()
    if report is None:
        raise Http404("no such report")
    found, membership = assignment_for_member(user=request.user, assignment_id=report.assignment_id, staff=True)
    context = {"report": report, "index": index, "assignment": found, "course": found.course, **_roles(membership)}
    return render(request, "classroom/similarity_pair.html", context)
