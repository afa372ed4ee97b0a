"""What each member of a course sees: join codes and emails, submissions, course datasets, hidden
tests' details before and after grading; the grader's own runs with a real worker; drafts."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from playground.classroom import grading, grading_results
from playground.models import (
    Assignment,
    Course,
    CourseInvitation,
    Membership,
    Role,
    Run,
    StaffAccess,
    Submission,
    TestResult,
)
from tests.playground.classroom.course_world import (
    AFTER_DUE,
    ASSIGNMENT_BODY,
    COURSE_TITLE,
    HIDDEN,
    HIDDEN_FEEDBACK,
    NEVER_FOR_STUDENTS,
    ROLES,
    VISIBLE,
    VISIBLE_CHECK,
    A,
    C,
    D,
    Upload,
    World,
    grade,
    person,
)
from tests.playground.conftest import api, json_error

pytestmark = pytest.mark.django_db


# --- what each member sees ----------------------------------------------------------------


def test_only_staff_see_the_join_code_and_the_members_emails(world: World) -> None:
    code = Course.objects.get(id=world.ids["course"]).join_code
    for role in ("instructor", "assistant"):
        assert world.get_json(role, C)["join_code"] == code
        emails = {m["username"]: m["email"] for m in world.get_json(role, C + "/members")}
        assert emails["student"] == "student@example.com"
    for role in ("student", "classmate"):
        course = world.get_json(role, C)
        assert course["join_code"] is None and course["join_open"] is True and course["role"] == "student"
        assert code is not None and code.encode() not in world.request(role, "get", C).content


def test_a_student_lists_only_their_own_submissions(world: World) -> None:
    path = A + "/submissions"
    mine = world.get_json("student", path)
    assert [s["id"] for s in mine] == [world.ids["submission"]] and "tests" not in mine[0]
    assert world.get_json("classmate", path) == []
    assert world.get_json("classmate", path + "?student=student") == []  # the filter is staff's
    for role in ("instructor", "assistant"):
        assert [s["id"] for s in world.get_json(role, path + "?student=student")] == [world.ids["submission"]]
        assert world.get_json(role, path + "?student=classmate") == []


def test_no_one_sees_a_course_dataset_among_their_own(world: World) -> None:
    for role in ROLES[:-1]:
        assert world.get_json(role, "/api/datasets") == [], role
    members = sorted(d["id"] for d in world.get_json("classmate", C + "/datasets"))
    assert members == sorted([world.ids["dataset"], world.ids["assistant_dataset"]])
    assert json_error(world.request("outsider", "get", C + "/datasets"), 404)["code"] == "not_found"


def test_each_role_is_told_which_course_datasets_it_may_delete(world: World) -> None:
    expected = {
        "instructor": {"people.csv": True, "helper.csv": True, "draft-only.csv": True},
        "assistant": {"people.csv": False, "helper.csv": True, "draft-only.csv": False},  # the one they uploaded
        "student": {"people.csv": False, "helper.csv": False},  # not the one only a draft uses
    }
    for role, may in expected.items():
        assert {d["name"]: d["can_delete"] for d in world.get_json(role, C + "/datasets")} == may, role
    error = json_error(world.request("assistant", "delete", C + "/datasets/{dataset}"), 403)
    assert error["code"] == "instructor_only" and "the assistant who uploaded it" in error["message"]


def test_an_assignment_cannot_take_another_courses_dataset(world: World) -> None:
    body = {**ASSIGNMENT_BODY, "dataset_ids": [world.ids["other_dataset"]]}
    error = json_error(world.request("instructor", "post", C + "/assignments", body), 404)
    assert error["code"] == "dataset_not_found" and error["field"] == "dataset_ids"
    assert json_error(world.request("instructor", "put", A, body), 404)["code"] == "dataset_not_found"


def test_a_browser_session_needs_csrf_for_classroom_writes(world: World) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(world.users["instructor"])
    assert browser.get(C.format(**world.ids)).status_code == 200
    refused = browser.patch(C.format(**world.ids), json.dumps({"title": "x"}), content_type="application/json")
    assert json_error(refused, 403)["code"] == "csrf_failed"
    assert Course.objects.get(id=world.ids["course"]).title == COURSE_TITLE


def test_an_email_invitation_is_not_for_whoever_took_that_address_as_a_username(world: World) -> None:
    """Anyone may sign up with an email-shaped username; an invitation by email address is for the
    account with that email, not for them."""
    CourseInvitation.objects.create(course_id=world.ids["course"], identifier="ada@school.example", role="assistant")
    squatter = User.objects.create_user(username="ada@school.example", password=None)
    as_squatter = api(squatter)
    assert as_squatter.get("/api/invitations").json() == []
    invitation = CourseInvitation.objects.get(identifier="ada@school.example")
    assert json_error(as_squatter.post(f"/api/invitations/{invitation.id}/accept"), 404)["code"] == "not_found"
    assert not Membership.objects.filter(user=squatter).exists()
    ada = User.objects.create_user(username="ada", email="Ada@School.example", password=None)
    assert [i["id"] for i in api(ada).get("/api/invitations").json()] == [invitation.id]
    # nor does a member under such a username make the address count as a member already
    cy = User.objects.create_user(username="cy@school.example", password=None)
    Membership.objects.create(course_id=world.ids["course"], user=cy, role=Role.STUDENT)
    roster = Upload("roster.csv", b"Ada@school.example\ncy@school.example\n")
    answer = world.request("instructor", "post", C + "/roster", roster).json()
    assert (answer["invited"], answer["already_invited"], answer["already_members"]) == (1, 1, 0)


def _tests_by_name(tests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tests}


@pytest.mark.parametrize("role", ["instructor", "assistant"])
def test_staff_see_every_detail_of_every_test(world: World, role: str) -> None:
    raw = world.request(role, "get", A).content.decode()
    for secret in [*VISIBLE.values(), VISIBLE_CHECK, *HIDDEN.values(), *AFTER_DUE.values()]:
        assert secret in raw, secret
    tests = _tests_by_name(world.get_json(role, A)["tests"])
    assert tests["hidden"]["args"] == [HIDDEN["arg"]] and tests["hidden"]["id"] is not None
    result = _tests_by_name(world.get_json(role, "/api/submissions/{submission}")["tests"])
    assert HIDDEN["expected"] in result["hidden"]["diff"] and result["hidden checker"]["feedback"] == HIDDEN_FEEDBACK
    assert result["hidden"]["run_id"] == world.ids["test_run"]
    assert result["hidden checker"]["check_run_id"] == world.ids["check_run"]


@pytest.mark.parametrize("role", ["student", "classmate"])
def test_a_student_sees_a_visible_tests_details_but_no_hidden_ones_and_no_checker(world: World, role: str) -> None:
    raw = world.request(role, "get", A).content
    for secret in [*NEVER_FOR_STUDENTS, *AFTER_DUE.values()]:
        assert secret.encode() not in raw, secret
    tests = _tests_by_name(world.get_json(role, A)["tests"])
    assert tests["visible"]["stdin"] == VISIBLE["stdin"] and tests["visible"]["args"] == [VISIBLE["arg"]]
    assert tests["visible"]["expected_stdout"] == VISIBLE["expected"]
    assert all(t.get("check_code") is None and t.get("id") is None for t in tests.values())
    for name in ("hidden", "hidden checker", "after due"):
        shown = {k: v for k, v in tests[name].items() if v is not None}
        assert set(shown) == {"name", "points", "visibility"}, (name, shown)


def _student_responses(world: World, role: str) -> bytes:
    """Every classroom answer a student gets about the assignment, as raw bytes."""
    paths = [C, C + "/assignments", C + "/datasets", A, A + "/submissions", "/api/runs", "/api/courses",
             "/assignments/{assignment}/"]  # fmt: skip
    if role == "student":
        paths += ["/api/submissions/{submission}", "/submissions/{submission}/"]
    responses = [world.request(role, "get", p) for p in paths]
    assert [r.status_code for r in responses] == [200] * len(paths), paths
    return b"\n".join(r.content for r in responses)


@pytest.mark.parametrize("role", ["student", "classmate"])
def test_no_response_to_a_student_holds_a_hidden_test_before_or_after_grading(world: World, role: str) -> None:
    Submission.objects.filter(id=world.ids["submission"]).delete()
    assignment = Assignment.objects.get(id=world.ids["assignment"])
    submission = grading.submission_create(user=world.users["student"], assignment=assignment, code="print(0)")
    world.ids["submission"] = str(submission.id)
    pending = world.get_json("student", "/api/submissions/{submission}")
    assert {t["status"] for t in pending["tests"]} == {"pending"}
    for graded in (False, True):
        if graded:
            grade(submission)
        raw = _student_responses(world, role)
        for secret in [*NEVER_FOR_STUDENTS, *AFTER_DUE.values()]:
            assert secret.encode() not in raw, (graded, secret)
    results = _tests_by_name(world.get_json("student", "/api/submissions/{submission}")["tests"])
    assert results["visible"]["expected_stdout"] == VISIBLE["expected"] and VISIBLE["expected"] in results[
        "visible"]["diff"]  # fmt: skip
    for name in ("hidden", "hidden checker", "after due"):
        shown = {k for k, v in results[name].items() if v is not None}
        assert shown == {"name", "points", "visibility", "status", "status_text", "score"}, (name, shown)
    assert results["visible checker"]["feedback"] == "the checker said no"  # a visible checker's is the student's


def test_a_hidden_test_says_failed_not_how_it_failed(world: World) -> None:
    TestResult.objects.filter(submission_id=world.ids["submission"], name__in=["hidden", "visible"]).update(
        status="memory_limit", detail=grading_results.result_words("memory_limit")
    )
    as_student = _tests_by_name(world.get_json("student", "/api/submissions/{submission}")["tests"])
    assert as_student["hidden"]["status"] == "failed" and as_student["visible"]["status"] == "memory_limit"
    assert "memory" not in json.dumps(as_student["hidden"])
    as_staff = _tests_by_name(world.get_json("assistant", "/api/submissions/{submission}")["tests"])
    assert as_staff["hidden"]["status"] == "memory_limit"


def test_after_due_tests_show_their_details_only_once_the_due_time_has_passed(world: World) -> None:
    def seen() -> bytes:
        return (
            world.request("student", "get", A).content
            + world.request("student", "get", "/api/submissions/{submission}").content
        )

    assert all(s.encode() not in seen() for s in AFTER_DUE.values())
    body = world.get_json("instructor", A)
    body.update(due_at=(timezone.now() - timedelta(minutes=1)).isoformat(), accept_late=True, dataset_ids=[])
    response = world.request("instructor", "put", A, body)
    assert response.status_code == 200, response.content
    assert response.json()["past_due"] is True
    raw = seen()
    assert all(s.encode() in raw for s in AFTER_DUE.values())
    assert all(s.encode() not in raw for s in NEVER_FOR_STUDENTS)
    tests = _tests_by_name(world.get_json("student", A)["tests"])
    assert tests["after due"]["args"] == [AFTER_DUE["arg"]] and tests["after due"]["check_code"] is None
    result = _tests_by_name(world.get_json("student", "/api/submissions/{submission}")["tests"])["after due"]
    assert result["expected_stdout"] == AFTER_DUE["expected"] and AFTER_DUE["expected"] in result["diff"]


# --- with a real worker: the grader's own runs ----------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.images
@pytest.mark.usefixtures("worker")
def test_real_grading_runs_are_the_staffs_and_tell_the_student_nothing_hidden() -> None:
    """Graded for real: the runs the grader made are kind test/check of the course, none of them
    readable by the student, every one readable by the instructor (and recorded)."""
    instructor, student = person("teacher"), person("pupil")
    as_instructor, as_student = api(instructor), api(student)
    tests = [
        {"name": "visible", "stdin": "2\n", "expected_stdout": "4"},
        {"name": "hidden", "visibility": "hidden", "stdin": "918273\n", "args": [HIDDEN["arg"]],
         "expected_stdout": "1836546"},
        {"name": "hidden checker", "visibility": "hidden", "stdin": "3\n",
         "check_code": f"print('{HIDDEN['check']}')\nraise SystemExit(1)"},
    ]  # fmt: skip
    created = as_instructor.post("/api/courses", json.dumps({"title": "Real"}), content_type="application/json")
    course = created.json()
    body = {"title": "Double", "runtime": "python", "tests": tests, "limits": {"wall_timeout_s": 5}, "publish": True}
    assignment = as_instructor.post(f"/api/courses/{course['id']}/assignments", json.dumps(body),
                                    content_type="application/json").json()  # fmt: skip
    joined = as_student.post("/api/courses/join", json.dumps({"join_code": course["join_code"]}),
                             content_type="application/json")  # fmt: skip
    assert joined.status_code == 201
    submitted = as_student.post(
        f"/api/assignments/{assignment['id']}/submissions",
        json.dumps({"code": "print(int(input()) * 2)"}),
        content_type="application/json",
    )
    assert submitted.status_code == 201, submitted.content
    seen = [submitted.content]
    deadline = time.monotonic() + 120
    while True:
        response = as_student.get(f"/api/submissions/{submitted.json()['id']}")
        seen.append(response.content)
        if response.json()["state"] in ("graded", "not_graded") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert response.json()["state"] == "graded", response.json()
    runs = list(Run.objects.filter(test_results__submission_id=submitted.json()["id"]))
    runs += list(Run.objects.filter(check_results__submission_id=submitted.json()["id"]))
    assert sorted(r.kind for r in runs) == ["check", "test", "test", "test"]
    assert {(str(r.course_id), r.owner_id) for r in runs} == {(course["id"], student.pk)}
    for run in runs:
        for path in (f"/api/runs/{run.id}", f"/api/runs/{run.id}/log?stream=stdout"):
            seen.append(json.dumps(json_error(as_student.get(path), 404)).encode())
            assert as_instructor.get(path).status_code == 200
    assert StaffAccess.objects.filter(staff=instructor, owner=student).count() == 2 * len(runs)
    seen += [as_student.get(p).content for p in ("/api/runs", f"/api/assignments/{assignment['id']}",
                                                 f"/api/assignments/{assignment['id']}/submissions")]  # fmt: skip
    assert as_student.get("/api/runs").json() == []
    raw = b"\n".join(seen)
    assert response.json()["score"] == 2  # the visible and the hidden expectation passed; the checker said no
    for secret in (HIDDEN["arg"], "918273", "1836546", HIDDEN["check"]):
        assert secret.encode() not in raw, secret


# --- drafts ---------------------------------------------------------------------------------


def test_no_student_response_names_a_draft_or_a_dataset_only_a_draft_uses(world: World) -> None:
    """A draft's title, and the dataset only it uses, appear in no answer to a student (lists,
    gradebook-free pages, the course page's script data) until it is published."""
    paths = [C, C + "/assignments", C + "/datasets", A, A + "/submissions", "/courses/{course}/", "/api/runs"]
    for role in ("student", "classmate"):
        for path in paths:
            body = world.request(role, "get", path).content
            assert b"Not yet" not in body and b"draft-only.csv" not in body, (role, path)
    staff_listing = world.get_json("instructor", C + "/assignments")
    assert {a["title"]: a["published"] for a in staff_listing} == {"Double it": True, "Not yet": False}
    assert "draft-only.csv" in {d["name"] for d in world.get_json("assistant", C + "/datasets")}
    preview = world.get_json("instructor", D + "/publication")
    assert preview["published"] is False and preview["datasets"] == ["draft-only.csv"]
    assert preview["tests_name_and_points_only"] == ["hidden", "hidden checker"]
    assert preview["tests_with_details"] == ["visible", "visible checker"] and preview["tests_after_due"] == [
        "after due"
    ]
    assert world.request("instructor", "post", D + "/publish", {"confirm": True}).status_code == 200
    assert "Not yet" in {a["title"] for a in world.get_json("student", C + "/assignments")}
    assert "draft-only.csv" in {d["name"] for d in world.get_json("student", C + "/datasets")}
    assert world.get_json("student", D)["published"] is True
