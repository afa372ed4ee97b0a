"""The classroom API's behaviour: courses and joining, roster imports and invitations, roles, the
course's policy over its assignments, assignment validation, the due time and attempts, the
gradebook and regrading (how a test's output is compared: test_compare_output.py)."""

from __future__ import annotations

import csv
import io
import itertools
import json
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from playground.classroom.courses import JOIN_ALPHABET
from playground.models import CourseInvitation, Membership, Submission, SubmissionState
from tests.playground.conftest import api, json_error

pytestmark = pytest.mark.django_db

DOUBLE_TEST = {"name": "doubles", "stdin": "2", "expected_stdout": "4"}


def person(username: str, email: str = "") -> User:
    """A user with no usable password (fast: no hashing); they call the API with a token."""
    return User.objects.create_user(username=username, email=email, password=None)


def call(client: Client, method: str, path: str, body: Any = None, status: int = 200) -> Any:
    data = "" if body is None else json.dumps(body)
    response = client.generic(method, path, data, "application/json")
    assert response.status_code == status, (response.status_code, response.content[:400])
    return response.json() if response.content else None


def new_course(client: Client, **policy: Any) -> dict[str, Any]:
    return call(client, "POST", "/api/courses", {"title": "Programming 1", **policy}, 201)


def assignment_body(**changes: Any) -> dict[str, Any]:
    return {"title": "Double it", "runtime": "python", "tests": [DOUBLE_TEST], "publish": True, **changes}


def new_assignment(client: Client, course_id: str, **changes: Any) -> dict[str, Any]:
    return call(client, "POST", f"/api/courses/{course_id}/assignments", assignment_body(**changes), 201)


def joined(course: dict[str, Any], username: str) -> tuple[User, Client]:
    user = person(username)
    client = api(user)
    call(client, "POST", "/api/courses/join", {"join_code": course["join_code"]}, 201)
    return user, client


def roster(client: Client, course_id: str, text: str) -> Any:
    upload = SimpleUploadedFile("roster.csv", text.encode(), content_type="text/csv")
    return client.post(f"/api/courses/{course_id}/roster", {"file": upload})


# --- courses and joining -------------------------------------------------------------------


def test_creating_a_course_makes_the_caller_its_instructor_with_an_eight_character_code() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor, allowed_runtimes=["python"], quota_runs_per_hour=10)
    assert course["role"] == "instructor" and course["staff"] == 1 and course["students"] == 0
    assert len(course["join_code"]) == 8 and set(course["join_code"]) <= set(JOIN_ALPHABET)
    assert course["join_open"] is True and course["allowed_runtimes"] == ["python"]
    assert course["quota_runs_per_hour"] == 10
    assert [c["id"] for c in call(instructor, "GET", "/api/courses")] == [course["id"]]
    assert call(api(person("stranger")), "GET", "/api/courses") == []


def test_joining_by_code_makes_a_student_and_joining_again_changes_nothing() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    user, student = joined(course, "pupil")
    again = call(student, "POST", "/api/courses/join", {"join_code": f" {course['join_code'].lower()} "}, 201)
    assert again["role"] == "student" and again["course_id"] == course["id"] and again["email"] == ""
    assert Membership.objects.filter(user=user).count() == 1
    assert call(instructor, "GET", f"/api/courses/{course['id']}")["students"] == 1
    # an instructor who joins with the code stays an instructor
    assert call(instructor, "POST", "/api/courses/join", {"join_code": course["join_code"]}, 201)["role"] == (
        "instructor"
    )


def test_a_rotated_code_stops_working_at_once_and_the_new_one_works() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    rotated = call(instructor, "POST", f"/api/courses/{course['id']}/join-code", {"action": "rotate"})
    assert rotated["join_code"] != course["join_code"] and len(rotated["join_code"]) == 8
    late = api(person("late"))
    refused = late.post("/api/courses/join", json.dumps({"join_code": course["join_code"]}), "application/json")
    error = json_error(refused, 404)
    assert error["code"] == "invalid_join_code" and error["field"] == "join_code"
    assert not Membership.objects.filter(user__username="late").exists()
    joined(rotated, "ontime")


def test_a_closed_course_refuses_joining() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    closed = call(instructor, "POST", f"/api/courses/{course['id']}/join-code", {"action": "close"})
    assert closed["join_code"] is None and closed["join_open"] is False
    for code in (course["join_code"], ""):
        refused = api(person(f"late{len(code)}")).post("/api/courses/join", json.dumps({"join_code": code}),
                                                        "application/json")  # fmt: skip
        assert json_error(refused, 404)["code"] == "invalid_join_code"
    assert Membership.objects.filter(course_id=course["id"]).count() == 1
    reopened = call(instructor, "POST", f"/api/courses/{course['id']}/join-code", {"action": "rotate"})
    assert reopened["join_open"] is True
    bad = instructor.post(f"/api/courses/{course['id']}/join-code", json.dumps({"action": "open"}), "application/json")
    assert json_error(bad, 422)["field"] == "action"


# --- roster imports and invitations --------------------------------------------------------


def test_a_roster_invites_by_username_and_email_and_reports_what_it_did_not() -> None:
    teacher = person("teacher")
    instructor = api(teacher)
    course = new_course(instructor)
    ann, bob, _ = person("ann"), person("bobby", email="Bob@Example.com"), person("carol")
    member, _ = joined(course, "already")
    CourseInvitation.objects.create(course_id=course["id"], identifier="dan", created_by=teacher)
    text = "username,role\nann\nbob@example.com\ncarol,assistant\nalready\nDAN\nnot a name!\neve,instructor\nann\n\n"
    response = roster(instructor, course["id"], text)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "invited": 3, "already_members": 1, "already_invited": 2, "invalid": ["not a name!", "eve,instructor"],
    }  # fmt: skip
    invitations = {i["identifier"]: i for i in call(instructor, "GET", f"/api/courses/{course['id']}/invitations")}
    assert set(invitations) == {"ann", "bob@example.com", "carol", "dan"}
    assert invitations["carol"]["role"] == "assistant" and invitations["ann"]["accepted_at"] is None

    mine = call(api(ann), "GET", "/api/invitations")
    assert [(i["course_id"], i["role"]) for i in mine] == [(course["id"], "student")]
    accepted = call(api(ann), "POST", f"/api/invitations/{mine[0]['id']}/accept", {}, 201)
    assert accepted["role"] == "student" and accepted["username"] == "ann"
    assert call(api(ann), "GET", "/api/invitations") == []
    by_email = call(api(bob), "GET", "/api/invitations")
    assert [i["id"] for i in by_email] == [invitations["bob@example.com"]["id"]]
    assert call(api(person("carol2")), "GET", "/api/invitations") == []  # not named: sees nothing
    carols = f"/api/invitations/{invitations['carol']['id']}/accept"
    assert json_error(api(person("mallory")).post(carols), 404)["code"] == "not_found"
    assert call(api(User.objects.get(username="carol")), "POST", carols, {}, 201)["role"] == "assistant"
    members = {m["username"]: m["role"] for m in call(instructor, "GET", f"/api/courses/{course['id']}/members")}
    assert members == {"teacher": "instructor", "already": "student", "ann": "student", "carol": "assistant"}
    accepted_by = {
        i["identifier"]: i["accepted_by"] for i in call(instructor, "GET", f"/api/courses/{course['id']}/invitations")
    }
    assert accepted_by == {"ann": "ann", "bob@example.com": None, "carol": "carol", "dan": None}
    assert member.pk in Membership.objects.filter(course_id=course["id"]).values_list("user_id", flat=True)


def test_a_roster_that_is_not_text_or_not_sent_is_refused() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    binary = SimpleUploadedFile("r.csv", b"\xff\xfe\x00bad", content_type="text/csv")
    assert json_error(instructor.post(f"/api/courses/{course['id']}/roster", {"file": binary}), 422)["field"] == "file"
    assert json_error(instructor.post(f"/api/courses/{course['id']}/roster", {}), 422)["code"] == "file_required"


# --- roles -----------------------------------------------------------------------------------


def test_the_last_instructor_can_be_neither_demoted_nor_removed() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    members = f"/api/courses/{course['id']}/members"
    for method, body in (("PATCH", {"role": "assistant"}), ("DELETE", None)):
        refused = instructor.generic(method, f"{members}/teacher", json.dumps(body) if body else "",
                                     "application/json")  # fmt: skip
        assert json_error(refused, 409)["code"] == "last_instructor"
    _, student = joined(course, "pupil")
    assert call(instructor, "PATCH", f"{members}/pupil", {"role": "assistant"})["role"] == "assistant"
    assert call(instructor, "PATCH", f"{members}/pupil", {"role": "instructor"})["role"] == "instructor"
    # with a second instructor the first may step down, and the second then stays
    assert call(instructor, "PATCH", f"{members}/teacher", {"role": "student"})["role"] == "student"
    assert json_error(student.delete(f"{members}/pupil"), 409)["code"] == "last_instructor"
    call(student, "DELETE", f"{members}/teacher", status=204)
    assert [m["username"] for m in call(student, "GET", members)] == ["pupil"]
    bad = student.patch(f"{members}/pupil", json.dumps({"role": "owner"}), "application/json")
    assert json_error(bad, 422)["field"] == "role"
    assert json_error(student.delete(f"{members}/nobody"), 404)["code"] == "not_found"


# --- the course's policy over its assignments ------------------------------------------------


def test_an_assignment_in_a_runtime_the_course_does_not_allow_is_refused() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor, allowed_runtimes=["python"])
    refused = instructor.post(f"/api/courses/{course['id']}/assignments",
                              json.dumps(assignment_body(runtime="node")), "application/json")  # fmt: skip
    error = json_error(refused, 422)
    assert error["code"] == "runtime_not_allowed" and error["field"] == "runtime"
    new_assignment(instructor, course["id"], runtime="python")
    empty = instructor.patch(f"/api/courses/{course['id']}", json.dumps({"allowed_runtimes": []}), "application/json")
    assert json_error(empty, 422)["field"] == "allowed_runtimes"


@pytest.mark.parametrize(
    ("limits", "code", "field"),
    [
        ({"wall_timeout_s": 6}, "limit_over_maximum", "limits.wall_timeout_s"),  # over the course's ceiling
        ({"memory_mib": 100_000}, "limit_over_maximum", "limits.memory_mib"),  # over the operator's maximum
        ({"bogus_limit": 1}, "unknown_limit", "limits.bogus_limit"),
        ({"cpu_time_s": 0}, "invalid_limit", "limits.cpu_time_s"),
        ({"memory_mib": 1.5}, "invalid_limit", "limits.memory_mib"),
    ],
)
def test_assignment_limits_stay_under_the_course_ceiling_and_the_operators_maxima(
    limits: dict[str, float], code: str, field: str
) -> None:
    assert settings.CORDON_MAXIMA.memory_mib < 100_000
    instructor = api(person("teacher"))
    course = new_course(instructor, limits_ceiling={"wall_timeout_s": 5})
    refused = instructor.post(f"/api/courses/{course['id']}/assignments",
                              json.dumps(assignment_body(limits=limits)), "application/json")  # fmt: skip
    error = json_error(refused, 422)
    assert (error["code"], error["field"]) == (code, field), error
    assert new_assignment(instructor, course["id"], limits={"wall_timeout_s": 5})["limits"] == {"wall_timeout_s": 5}


def test_a_course_ceiling_over_the_operators_maximum_is_refused() -> None:
    instructor = api(person("teacher"))
    over = settings.CORDON_MAXIMA.wall_timeout_s + 1
    refused = instructor.post("/api/courses", json.dumps({"title": "T", "limits_ceiling": {"wall_timeout_s": over}}),
                              "application/json")  # fmt: skip
    error = json_error(refused, 422)
    assert (error["code"], error["field"]) == ("limit_over_maximum", "limits_ceiling.wall_timeout_s")
    course = new_course(instructor)
    unknown = instructor.patch(f"/api/courses/{course['id']}", json.dumps({"limits_ceiling": {"speed": 1}}),
                               "application/json")  # fmt: skip
    assert json_error(unknown, 422)["field"] == "limits_ceiling.speed"


@pytest.mark.parametrize(
    ("values", "code", "field"),
    [
        ({"speed": 1}, "unknown_limit", "limits_ceiling.speed"),
        ({"wall_timeout_s": -1}, "invalid_limit", "limits_ceiling.wall_timeout_s"),
        ({"max_processes": 2.5}, "invalid_limit", "limits_ceiling.max_processes"),
        ({"memory_mib": "64"}, "invalid_limit", "limits_ceiling.memory_mib"),
        ([1, 2], "invalid_limit", "limits_ceiling"),
        ({"memory_mib": 10**9}, "limit_over_maximum", "limits_ceiling.memory_mib"),
    ],
)
def test_a_service_caller_gets_the_api_schemas_own_check_of_limits(values: Any, code: str, field: str) -> None:
    """Not only the API: a course's policy set from elsewhere (course creation's policy, a test)
    is checked by the same generated schema, in the same words."""
    from playground.classroom import courses as course_services
    from playground.errors import ServiceError

    with pytest.raises(ServiceError) as caught:
        course_services.check_partial_limits(values, field="limits_ceiling")
    assert (caught.value.code, caught.value.field) == (code, field), caught.value.message
    assert course_services.check_partial_limits({"max_processes": 8.0}, field="limits") == {"max_processes": 8}


# --- assignment validation -----------------------------------------------------------------


def _with_test(index: int, **changes: Any) -> list[dict[str, Any]]:
    tests = [dict(DOUBLE_TEST), {"name": "second", "expected_stdout": "x"}]
    tests[index].update(changes)
    return tests


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tests": _with_test(1, points=-1)}, "tests.1.points"),
        ({"tests": _with_test(1, points=5000)}, "tests.1.points"),
        ({"tests": _with_test(0, check_code="raise SystemExit(0)")}, "tests.0.expected_stdout"),  # both
        ({"tests": _with_test(0, expected_stdout=None)}, "tests.0.expected_stdout"),  # neither
        ({"tests": _with_test(1, match="regex", expected_stdout="(unclosed")}, "tests.1.expected_stdout"),
        ({"tests": _with_test(0, name="  ")}, "tests.0.name"),
        ({"tests": _with_test(0, visibility="secret")}, "tests.0.visibility"),
        ({"tests": _with_test(1, match="fuzzy")}, "tests.1.match"),
        ({"tests": _with_test(0, args=["a\0b"])}, "tests.0.args.0"),
        ({"tests": _with_test(1, expected_stdout=None, check_code="1", check_runtime="go")}, "tests.1.check_runtime"),
        ({"title": ""}, "title"),
        ({"opens_at": "2030-01-02T00:00:00Z", "due_at": "2030-01-01T00:00:00Z"}, "due_at"),
        ({"attempts_allowed": -1}, "attempts_allowed"),
    ],
)
def test_an_invalid_assignment_is_refused_naming_its_field(changes: dict[str, Any], field: str) -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    refused = instructor.post(f"/api/courses/{course['id']}/assignments", json.dumps(assignment_body(**changes)),
                              "application/json")  # fmt: skip
    assert json_error(refused, 422)["field"] == field
    assert call(instructor, "GET", f"/api/courses/{course['id']}/assignments") == []


def test_a_check_test_and_a_regex_test_are_accepted_and_changing_tests_raises_the_version() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    tests: list[dict[str, Any]] = [
        {"name": "check", "check_code": "raise SystemExit(0)", "check_runtime": "python", "points": 2},
        {"name": "pattern", "expected_stdout": r"\d+", "match": "regex", "visibility": "after_due"},
    ]
    created = new_assignment(instructor, course["id"], tests=tests)
    assert created["max_score"] == 3 and created["tests_version"] == 1
    same = call(instructor, "PUT", f"/api/assignments/{created['id']}", assignment_body(tests=tests))
    assert same["tests_version"] == 1
    tests[1]["expected_stdout"] = r"\d{2}"
    changed = call(instructor, "PUT", f"/api/assignments/{created['id']}", assignment_body(tests=tests))
    assert changed["tests_version"] == 2 and changed["tests"][1]["expected_stdout"] == r"\d{2}"


# --- opening, the due time, attempts -------------------------------------------------------


def _iso(delta: timedelta) -> str:
    return (timezone.now() + delta).isoformat()


def test_an_assignment_not_yet_open_is_hidden_from_students_but_not_from_staff() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    later = new_assignment(instructor, course["id"], title="Later", opens_at=_iso(timedelta(days=1)))
    now = new_assignment(instructor, course["id"], title="Now")
    _, student = joined(course, "pupil")
    listing = f"/api/courses/{course['id']}/assignments"
    assert [a["title"] for a in call(student, "GET", listing)] == ["Now"]
    assert {a["title"] for a in call(instructor, "GET", listing)} == {"Now", "Later"}
    for method, path, body in (("GET", f"/api/assignments/{later['id']}", None),
                               ("POST", f"/api/assignments/{later['id']}/submissions", {"code": "1"}),
                               ("GET", f"/api/assignments/{later['id']}/submissions", None),
                               ("POST", f"/api/assignments/{later['id']}/try", {"code": "1"})):  # fmt: skip
        refused = student.generic(method, path, json.dumps(body) if body else "", "application/json")
        assert json_error(refused, 404)["code"] == "not_found", path
    assert call(instructor, "GET", f"/api/assignments/{later['id']}")["title"] == "Later"
    assert call(student, "GET", f"/api/assignments/{now['id']}")["title"] == "Now"
    # staff see it, but not even they may submit before it opens
    early = instructor.post(f"/api/assignments/{later['id']}/submissions", json.dumps({"code": "1"}),
                            "application/json")  # fmt: skip
    assert json_error(early, 422)["code"] == "not_open"


def test_past_due_is_refused_unless_late_work_is_accepted_and_then_it_is_marked_late() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    strict = new_assignment(instructor, course["id"], title="Strict", due_at=_iso(-timedelta(minutes=1)))
    lenient = new_assignment(instructor, course["id"], title="Lenient", due_at=_iso(-timedelta(minutes=1)),
                             accept_late=True)  # fmt: skip
    _, student = joined(course, "pupil")
    refused = student.post(f"/api/assignments/{strict['id']}/submissions", json.dumps({"code": "1"}),
                           "application/json")  # fmt: skip
    assert json_error(refused, 422)["code"] == "past_due"
    assert not Submission.objects.filter(assignment_id=strict["id"]).exists()
    late = call(student, "POST", f"/api/assignments/{lenient['id']}/submissions", {"code": "print(4)"}, 201)
    assert late["late"] is True and late["state"] == "queued" and late["attempt"] == 1
    mine = call(student, "GET", f"/api/assignments/{lenient['id']}")["my"]
    assert mine["late"] is True and mine["attempts_used"] == 1 and mine["submission_id"] == late["id"]
    on_time = new_assignment(instructor, course["id"], title="On time", due_at=_iso(timedelta(days=1)))
    assert call(student, "POST", f"/api/assignments/{on_time['id']}/submissions", {"code": "1"}, 201)["late"] is False


def test_attempts_allowed_counts_charged_and_pending_submissions_but_not_uncharged_ones() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    assignment = new_assignment(instructor, course["id"], attempts_allowed=3)
    user, student = joined(course, "pupil")
    for charged, state in ((True, SubmissionState.GRADED), (False, SubmissionState.NOT_GRADED)):
        Submission.objects.create(assignment_id=assignment["id"], student=user, code="1", charged=charged, state=state)
    mine = call(student, "GET", f"/api/assignments/{assignment['id']}")["my"]
    assert (mine["attempts_used"], mine["attempts_left"]) == (1, 2)
    second = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "1"}, 201)
    assert second["charged"] is None and second["attempt"] == 2  # still being graded: it counts already
    Submission.objects.create(assignment_id=assignment["id"], student=user, code="1", charged=True,
                              state=SubmissionState.GRADED)  # fmt: skip
    refused = student.post(f"/api/assignments/{assignment['id']}/submissions", json.dumps({"code": "1"}),
                           "application/json")  # fmt: skip
    assert json_error(refused, 422)["code"] == "no_attempts_left"
    assert call(student, "GET", f"/api/assignments/{assignment['id']}")["my"]["attempts_left"] == 0
    # another student's attempts are their own
    _, other = joined(course, "other")
    call(other, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": "1"}, 201)


# --- the gradebook and regrading -----------------------------------------------------------


SUBMITTED = itertools.count()


def _graded(assignment_id: str, student: User, score: float | None, **fields: Any) -> Submission:
    """A submission row (graded with `score`, or still queued), a second after the one made before."""
    state = SubmissionState.GRADED if score is not None else SubmissionState.QUEUED
    charged = True if score is not None else None
    submission = Submission.objects.create(
        assignment_id=assignment_id, student=student, code="1", score=score, state=state, charged=charged, **fields
    )
    at = timezone.now() + timedelta(seconds=next(SUBMITTED))
    Submission.objects.filter(id=submission.id).update(created_at=at)
    submission.created_at = at
    return submission


def test_the_gradebook_has_a_row_per_student_and_a_cell_per_assignment() -> None:
    instructor_user = person("teacher")
    instructor = api(instructor_user)
    course = new_course(instructor)
    first = new_assignment(instructor, course["id"], title="First", due_at=_iso(timedelta(days=1)),
                           tests=[{**DOUBLE_TEST, "points": 2}, {"name": "b", "expected_stdout": "x"}])  # fmt: skip
    second = new_assignment(instructor, course["id"], title="Second", due_at=_iso(timedelta(days=2)))
    bea, _ = joined(course, "bea")
    joined(course, "abe")
    _graded(first["id"], bea, 1.0)
    best = _graded(first["id"], bea, 3.0, late=True)
    pending = _graded(first["id"], bea, None)  # graded one stays the cell's, the pending one counts an attempt
    _graded(first["id"], instructor_user, 3.0)  # staff's own submissions are not a row
    book = call(instructor, "GET", f"/api/courses/{course['id']}/gradebook")
    assert book["assignments"] == [
        {"id": first["id"], "title": "First", "max_score": 3.0, "published": True},
        {"id": second["id"], "title": "Second", "max_score": 1.0, "published": True},
    ]
    assert [s["username"] for s in book["students"]] == ["abe", "bea"]
    assert book["students"][0]["cells"] == [None, None]
    cell = book["students"][1]["cells"][0]
    assert cell == {"assignment_id": first["id"], "score": 3.0, "tests_score": 3.0, "adjustment": 0.0,
                    "state": "graded", "attempts": 3, "late": True, "late_days": 0,
                    "submission_id": str(best.id)}  # fmt: skip
    assert book["students"][1]["cells"][1] is None and pending.state == "queued"


def test_the_gradebook_csv_has_a_row_per_student_and_no_cell_starts_a_formula() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    plain = new_assignment(instructor, course["id"], title="Plain", due_at=_iso(timedelta(days=1)))
    formula = new_assignment(instructor, course["id"], title='=HYPERLINK("http://x.example")',
                             due_at=_iso(timedelta(days=2)))  # fmt: skip
    sly, _ = joined(course, "-2+3")  # a valid username that a spreadsheet would compute
    at, _ = joined(course, "@sum")
    joined(course, "zed")
    _graded(plain["id"], sly, 1.0)
    _graded(formula["id"], at, 0.5)
    response = instructor.get(f"/api/courses/{course['id']}/gradebook.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["student", "Plain (/1)", '\'=HYPERLINK("http://x.example") (/1)']
    assert rows[1:] == [["'-2+3", "1", ""], ["'@sum", "", "0.5"], ["zed", "", ""]]


def test_regrade_answers_how_many_latest_graded_submissions_it_grades_again() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    assignment = new_assignment(instructor, course["id"])
    students = [joined(course, name)[0] for name in ("ann", "ben", "cat")]
    _graded(assignment["id"], students[0], 0.0)
    latest = _graded(assignment["id"], students[0], 1.0)
    _graded(assignment["id"], students[1], 1.0)
    _graded(assignment["id"], students[2], None)  # not graded yet: nothing to grade again
    assert call(instructor, "POST", f"/api/assignments/{assignment['id']}/regrade", {}) == {"regrading": 2}
    latest.refresh_from_db()
    assert latest.state == "queued" and latest.score is None and latest.regraded == 1
    assert [r.status for r in latest.results.all()] == ["pending"]
    empty = new_assignment(instructor, course["id"], title="Nobody yet")
    assert call(instructor, "POST", f"/api/assignments/{empty['id']}/regrade", {}) == {"regrading": 0}


def test_a_roster_line_with_a_nul_character_is_reported_invalid_not_stored() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    response = roster(instructor, course["id"], "ann\nal\0@example.org\nbo\0b\n")
    assert response.status_code == 200, response.content
    assert response.json()["invalid"] == ["al\0@example.org", "bo\0b"] and response.json()["invited"] == 1
    assert list(CourseInvitation.objects.values_list("identifier", flat=True)) == ["ann"]


def test_a_course_dataset_replaced_by_an_upload_of_its_name_is_what_its_assignments_read_from_then_on() -> None:
    instructor = api(person("teacher"))
    course = new_course(instructor)
    where = f"/api/courses/{course['id']}/datasets"

    def send(data: bytes, query: str = "") -> Any:
        return instructor.post(where + query, {"file": SimpleUploadedFile("people.csv", data, content_type="text/csv")})

    old = send(b"name\nada\n").json()
    body = {"title": "Read it", "runtime": "python", "dataset_ids": [old["id"]]}
    assignment = call(instructor, "POST", f"/api/courses/{course['id']}/assignments", body, 201)
    assert json_error(send(b"name\ngrace\n"), 409)["code"] == "duplicate_name"
    new = send(b"name\ngrace\n", "?replace=true").json()
    assert [d["id"] for d in call(instructor, "GET", where)] == [new["id"]]
    read = call(instructor, "GET", f"/api/assignments/{assignment['id']}")
    assert [d["id"] for d in read["datasets"]] == [new["id"]]
    # an assignment saved again with the id it read before reads the new file too
    again = call(instructor, "PUT", f"/api/assignments/{assignment['id']}", {**body, "dataset_ids": [old["id"]]})
    assert [d["id"] for d in again["datasets"]] == [new["id"]]


def test_with_courses_by_instructors_only_an_account_without_add_course_is_refused(settings: Any) -> None:
    from django.contrib.auth.models import Group, Permission

    settings.CORDON_COURSE_CREATORS = "instructors"
    refused = json_error(
        api(person("plain")).post("/api/courses", {"title": "Mine"}, content_type="application/json"), 403
    )
    assert refused["code"] == "not_an_instructor"
    page = Client()
    page.force_login(User.objects.get(username="plain"))
    assert b"create-form" not in page.get("/courses/").content  # no form that could only be refused
    teacher = person("teacher")
    instructors, _ = Group.objects.get_or_create(name="instructors")
    instructors.permissions.add(Permission.objects.get(codename="add_course"))
    teacher.groups.add(instructors)
    assert new_course(api(teacher))["title"] == "Programming 1"
    page.force_login(teacher)
    assert b"create-form" in page.get("/courses/").content
    settings.CORDON_COURSE_CREATORS = "everyone"
    assert new_course(api(person("anyone")))["title"] == "Programming 1"


def test_the_course_page_shows_the_saved_policy_and_its_save_button_waits_for_the_page_script() -> None:
    """The tester's "Save policy" that saved nothing: clicked before the page's script had taken the
    form over, the browser sent it as a plain GET (a reload) and the fields came back empty. The
    page now carries the saved figures itself and offers Save only once the script is ready."""
    instructor = person("ines")
    course = new_course(api(instructor), late_days=2, late_days_per_assignment=2)
    browser = Client()
    browser.force_login(instructor)
    page = browser.get(f"/courses/{course['id']}/").content.decode()
    assert 'id="policy-late-days" value="2"' in page and 'id="policy-late-days-each" value="2"' in page
    assert '<button type="submit" class="primary" id="policy-save" disabled>Save policy</button>' in page
    assert '<button type="submit" id="roster-import" disabled>Import roster</button>' in page
