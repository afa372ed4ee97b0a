"""What a course needs around grading: per-student extensions, late days spent automatically and
atomically, scores adjusted by hand with a comment (rubric items reusable), every attempt of a
student, the gradebook with a column per test, and a waiting student's place in the queue."""

from __future__ import annotations

import csv
import io
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import close_old_connections
from django.utils import timezone

from playground.classroom import courses as course_services
from playground.classroom import grading, grading_queue
from playground.classroom.signals import score_changed
from playground.errors import ServiceError
from playground.models import (
    Assignment,
    LateDaySpend,
    Membership,
    Role,
    StaffAccess,
    Submission,
    SubmissionState,
    TestResult,
)
from tests.playground.classroom.test_courses_api import DOUBLE_TEST, call, joined, new_assignment, new_course, person
from tests.playground.conftest import api, json_error

pytestmark = pytest.mark.django_db


def _ago(**delta: Any) -> str:
    return (timezone.now() - timedelta(**delta)).isoformat()


def _late_days_course(instructor: Any, days: int = 3, each: int = 2) -> dict[str, Any]:
    course = new_course(instructor)
    call(instructor, "PATCH", f"/api/courses/{course['id']}", {"late_days": days, "late_days_per_assignment": each})
    return course


def _graded(submission_id: str, score: float) -> Submission:
    Submission.objects.filter(id=submission_id).update(
        state=SubmissionState.GRADED, score=score, charged=True, graded_at=timezone.now()
    )
    return Submission.objects.get(id=submission_id)


# --- late days and extensions ---------------------------------------------------------------


def test_a_late_submission_spends_whole_late_days_and_the_student_is_told_what_is_left() -> None:
    instructor = api(person("teacher"))
    course = _late_days_course(instructor)
    first = new_assignment(instructor, course["id"], title="One", due_at=_ago(hours=26))  # 2 days begun
    second = new_assignment(instructor, course["id"], title="Two", due_at=_ago(hours=3))
    third = new_assignment(instructor, course["id"], title="Three", due_at=_ago(hours=50))  # needs 3 > 2 each
    _, student = joined(course, "sam")
    made = call(student, "POST", f"/api/assignments/{first['id']}/submissions", {"code": "print(4)"}, 201)
    assert made["late"] is False and made["late_days"] == 2
    again = call(student, "POST", f"/api/assignments/{first['id']}/submissions", {"code": "print(4)"}, 201)
    assert again["late_days"] == 0  # this assignment's days are spent already: the same day costs nothing more
    mine = call(student, "GET", f"/api/assignments/{first['id']}")["my"]
    assert mine["late_days"] == {"allowed": 3, "per_assignment": 2, "used": 2, "left": 1, "on_this_assignment": 2,
                                 "text": "2 late days used, 1 left"}  # fmt: skip
    call(student, "POST", f"/api/assignments/{second['id']}/submissions", {"code": "print(4)"}, 201)
    refused = json_error(student.post(f"/api/assignments/{third['id']}/submissions", {"code": "1"},
                                      content_type="application/json"), 422)  # fmt: skip
    assert (
        refused["code"] == "past_due" and "needs 3 late days" in refused["message"] and "0 left" in refused["message"]
    )
    record = call(instructor, "GET", f"/api/courses/{course['id']}/students/sam")
    assert record["late_days"] == {"allowed": 3, "used": 3, "left": 0}
    assert [a["late_days"] for a in record["assignments"]] == [0, 2, 1]  # by due time: Three, One, Two


def test_without_late_days_left_late_work_is_marked_late_where_it_is_accepted() -> None:
    instructor = api(person("teacher"))
    course = _late_days_course(instructor, days=1, each=1)
    accepting = new_assignment(instructor, course["id"], due_at=_ago(hours=30), accept_late=True)
    _, student = joined(course, "sam")
    made = call(student, "POST", f"/api/assignments/{accepting['id']}/submissions", {"code": "1"}, 201)
    assert made["late"] is True and made["late_days"] == 0  # 2 days needed, 1 allowed: late, none spent
    assert not LateDaySpend.objects.exists()


def test_an_extension_moves_one_students_due_time_and_its_after_due_tests_with_it() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    tests = [DOUBLE_TEST, {"name": "later", "visibility": "after_due", "stdin": "AFTER-STDIN", "expected_stdout": "x"}]
    assignment = new_assignment(instructor, course["id"], due_at=_ago(hours=1), tests=tests)
    _, extended = joined(course, "ext")
    _, other = joined(course, "other")
    given = call(instructor, "PUT", f"/api/assignments/{assignment['id']}/extensions",
                 {"student": "ext", "due_at": _ago(days=-2), "reason": "ill"})  # fmt: skip
    assert given["student"] == "ext" and given["granted_by"] == "teacher"
    made = call(extended, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "1"}, 201)
    assert made["late"] is False
    seen = call(extended, "GET", f"/api/assignments/{assignment['id']}")
    assert seen["my"]["extended"] is True and "AFTER-STDIN" not in str(seen)  # their due time has not passed
    assert "AFTER-STDIN" in str(call(other, "GET", f"/api/assignments/{assignment['id']}"))
    refused = other.post(f"/api/assignments/{assignment['id']}/submissions", {"code": "1"},
                         content_type="application/json")  # fmt: skip
    assert json_error(refused, 422)["code"] == "past_due"
    call(instructor, "DELETE", f"/api/assignments/{assignment['id']}/extensions/ext", status=204)
    assert call(extended, "GET", f"/api/assignments/{assignment['id']}")["my"]["extended"] is False


@pytest.mark.django_db(transaction=True)
def test_two_racing_late_submissions_with_one_late_day_left_spend_it_once() -> None:
    """Two assignments each a day late, one late day left: submitted at once (two threads, two
    database connections), exactly one spends it and the other is refused."""
    teacher = person("teacher")
    course = course_services.course_create(user=teacher, title="Race")
    course_services.course_update(course=course, changes={"late_days": 1, "late_days_per_assignment": 1})
    body = {"title": "A", "runtime": "python", "tests": [DOUBLE_TEST], "due_at": timezone.now() - timedelta(hours=2),
            "publish": True}  # fmt: skip
    assignments = [course_services.assignment_save(course=course, data={**body, "title": t}) for t in ("A", "B")]
    student = person("racer")
    Membership.objects.create(course=course, user=student, role=Role.STUDENT)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def submit(assignment: Assignment) -> None:
        try:
            barrier.wait(timeout=10)
            grading.submission_create(user=student, assignment=assignment, code="print(4)")
            outcomes.append("spent")
        except ServiceError as exc:
            outcomes.append(exc.code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=submit, args=(a,)) for a in assignments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["past_due", "spent"], outcomes
    assert sum(LateDaySpend.objects.filter(student=student).values_list("days", flat=True)) == 1
    assert Submission.objects.filter(student=student).count() == 1


# --- manual grading -------------------------------------------------------------------------


def test_an_adjustment_changes_the_final_score_which_the_student_sees_with_the_comment() -> None:
    instructor = api(person("teacher"))
    assistant_user = person("ta")
    course = new_course(instructor)
    Membership.objects.create(course_id=course["id"], user=assistant_user, role=Role.ASSISTANT)
    assistant = api(assistant_user)
    assignment = new_assignment(instructor, course["id"], tests=[{**DOUBLE_TEST, "points": 4}])
    items = call(instructor, "PUT", f"/api/assignments/{assignment['id']}/rubric",
                 {"items": [{"label": "no comments", "points": -1}, {"label": "more", "points": 2}]})  # fmt: skip
    _, student = joined(course, "sam")
    made = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "print(4)"}, 201)
    early = assistant.post(f"/api/submissions/{made['id']}/adjustments", {"points": 1, "comment": "x"},
                           content_type="application/json")  # fmt: skip
    assert json_error(early, 409)["code"] == "not_graded"
    _graded(made["id"], 3.0)
    sent: list[float | None] = []

    def heard(sender: Any, submission: Submission, **_: Any) -> None:
        sent.append(submission.final_score)

    score_changed.connect(heard)
    try:
        by_item = call(assistant, "POST", f"/api/submissions/{made['id']}/adjustments",
                       {"rubric_item_id": items[0]["id"]}, 201)  # fmt: skip
        own = call(instructor, "POST", f"/api/submissions/{made['id']}/adjustments",
                   {"points": 1.5, "comment": "clear names"}, 201)  # fmt: skip
    finally:
        score_changed.disconnect(heard)
    assert by_item["points"] == -1 and by_item["comment"] == "no comments" and by_item["by"] == "ta"
    seen = call(student, "GET", f"/api/submissions/{made['id']}")
    assert seen["score"] == 3.0 and seen["adjustment"] == 0.5 and seen["final_score"] == 3.5
    assert [(a["points"], a["comment"]) for a in seen["adjustments"]] == [(-1, "no comments"), (1.5, "clear names")]
    withdrawn = call(instructor, "DELETE", f"/api/submissions/{made['id']}/adjustments/{own['id']}")
    assert withdrawn["withdrawn_by"] == "teacher" and withdrawn["withdrawn_at"]
    seen = call(student, "GET", f"/api/submissions/{made['id']}")
    assert seen["final_score"] == 2.0 and [a["comment"] for a in seen["adjustments"]] == ["no comments"]
    staff_view = call(instructor, "GET", f"/api/submissions/{made['id']}")
    assert [a["withdrawn_by"] for a in staff_view["adjustments"]] == [None, "teacher"]  # kept on record
    book = call(instructor, "GET", f"/api/courses/{course['id']}/gradebook")
    cell = book["students"][0]["cells"][0]
    assert (cell["score"], cell["tests_score"], cell["adjustment"]) == (2.0, 3.0, -1.0)
    assert call(student, "GET", f"/api/courses/{course['id']}/assignments")[0]["my"]["score"] == 2.0
    heavy = call(
        instructor, "POST", f"/api/submissions/{made['id']}/adjustments", {"points": -9, "comment": "copied"}, 201
    )
    assert heavy and call(student, "GET", f"/api/submissions/{made['id']}")["final_score"] == 0.0  # never below 0
    refused = instructor.post(f"/api/submissions/{made['id']}/adjustments", {"points": 1, "comment": ""},
                              content_type="application/json")  # fmt: skip
    assert json_error(refused, 422)["code"] == "invalid_comment"


# --- attempts and the gradebook -----------------------------------------------------------------


def test_the_gradebook_csv_gives_a_column_per_test_and_the_adjustment_on_request() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    tests = [{**DOUBLE_TEST, "points": 2}, {"name": "=cmd()", "stdin": "3", "expected_stdout": "6"}]
    assignment = new_assignment(instructor, course["id"], title="Double", tests=tests)
    _, student = joined(course, "sam")
    made = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "print(4)"}, 201)
    TestResult.objects.filter(submission_id=made["id"], name="doubles").update(score=2.0, status="passed")
    TestResult.objects.filter(submission_id=made["id"], name="=cmd()").update(score=0.0, status="failed")
    _graded(made["id"], 2.0)
    call(instructor, "POST", f"/api/submissions/{made['id']}/adjustments", {"points": 0.5, "comment": "ok"}, 201)
    plain = list(csv.reader(io.StringIO(instructor.get(f"/api/courses/{course['id']}/gradebook.csv").content.decode())))
    assert plain == [["student", "Double (/3)"], ["sam", "2.5"]]
    response = instructor.get(f"/api/courses/{course['id']}/gradebook.csv?tests=true")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["student", "Double (/3)", "Double: doubles (/2)", "Double: =cmd() (/1)", "Double: adjustment"]
    assert rows[1] == ["sam", "2.5", "2", "0", "0.5"]


def test_a_students_record_lists_every_attempt_and_each_staff_view_is_recorded() -> None:
    teacher = person("teacher")
    instructor = api(teacher)
    course = new_course(instructor)
    assignment = new_assignment(instructor, course["id"], tests=[{**DOUBLE_TEST, "points": 2}])
    _, student = joined(course, "sam")
    ids = [call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": str(i)}, 201)["id"]
           for i in range(3)]  # fmt: skip
    for submission_id, score in zip(ids, (0.0, 1.0, 2.0), strict=True):
        _graded(submission_id, score)
    record = call(instructor, "GET", f"/api/courses/{course['id']}/students/sam")
    attempts = record["assignments"][0]["attempts"]
    assert [(a["attempt"], a["final_score"]) for a in attempts] == [(1, 0.0), (2, 1.0), (3, 2.0)]
    assert [a["id"] for a in attempts] == ids  # oldest first: scores over time
    assert StaffAccess.objects.filter(staff=teacher, what="student record", owner__username="sam").count() == 1
    assert call(instructor, "GET", f"/api/courses/{course['id']}/students/teacher", status=404)


# --- waiting, said ------------------------------------------------------------------------------


def test_a_waiting_submission_is_told_its_place_and_an_estimate_from_the_fair_queue(settings: Any) -> None:
    """The queue's own order: a flooder's five submissions came first, then two students' one each.
    Each of those two is second or third in line, not behind all five (fair queue), and the estimate
    grows with the runs ahead."""
    settings.CORDON_GRADING_SLOTS = 2
    instructor = api(person("teacher"))
    course = new_course(instructor)
    tests = [DOUBLE_TEST, {**DOUBLE_TEST, "name": "again"}]
    assignment = new_assignment(instructor, course["id"], tests=tests)
    path = f"/api/assignments/{assignment['id']}/submissions"
    _, flooder = joined(course, "flood")
    settings.CORDON_SUBMISSIONS_PER_MINUTE_STUDENT = 100
    for _ in range(5):
        call(flooder, "POST", path, {"code": "1"}, 201)
    _, first = joined(course, "first")
    _, second = joined(course, "second")
    mine = call(first, "POST", path, {"code": "1"}, 201)
    theirs = call(second, "POST", path, {"code": "1"}, 201)
    # served in turns F, first, second, F, first, second: first's 2 tests end after 4 runs of others'
    place = call(first, "GET", f"/api/submissions/{mine['id']}")["queue"]
    assert place["place"] == 2 and place["runs_ahead"] == 3
    later = call(second, "GET", f"/api/submissions/{theirs['id']}")["queue"]
    assert later["place"] == 3 and later["runs_ahead"] == 4
    assert later["estimate_s"] >= place["estimate_s"] > 0
    last = Submission.objects.filter(student__username="flood").order_by("created_at").last()
    assert last is not None
    flood_last = grading_queue.queue_place(last)
    # behind the two others' tests and its own eight earlier ones; only the two others are other students
    assert flood_last is not None and (flood_last["runs_ahead"], flood_last["place"]) == (2 + 2 + 8, 3)
    TestResult.objects.filter(submission_id=mine["id"]).update(status="running")
    assert call(first, "GET", f"/api/submissions/{mine['id']}")["queue"] is None


def test_a_late_submission_we_could_not_grade_gives_its_late_days_back() -> None:
    """Not graded through no fault of the student's: not an attempt, and not their late days."""
    from playground.classroom.grading_results import finish_submission

    instructor = api(person("teacher"))
    course = _late_days_course(instructor, days=2, each=2)
    assignment = new_assignment(instructor, course["id"], due_at=_ago(hours=30))
    _, student = joined(course, "sam")
    made = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "1"}, 201)
    assert made["late_days"] == 2
    TestResult.objects.filter(submission_id=made["id"]).update(status="not_graded", detail="the host failed")
    finish_submission(made["id"])
    seen = call(student, "GET", f"/api/submissions/{made['id']}")
    assert seen["state"] == "not_graded" and seen["late_days"] == 0 and "late days were given back" in seen["note"]
    assert call(student, "GET", f"/api/assignments/{assignment['id']}")["my"]["late_days"]["left"] == 2
    again = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "1"}, 201)
    assert again["late_days"] == 2  # spent again by the submission that is graded
