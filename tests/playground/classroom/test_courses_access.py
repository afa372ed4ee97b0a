"""Who may do what in a course: every classroom endpoint as the instructor, an assistant, the
submitting student, a classmate, a student of another course and an anonymous caller, read as one
matrix; grading runs that only the course's staff may read (each read recorded); hidden tests whose
details reach no student, before or after grading."""

from __future__ import annotations

import json
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from playground.asgi import application
from playground.models import (
    Run,
    RunKind,
    StaffAccess,
)
from tests.playground.classroom.course_world import (
    ASSIGNMENT_BODY,
    COURSE_TITLE,
    HIDDEN,
    NEVER_FOR_STUDENTS,
    ROLES,
    A,
    C,
    D,
    Upload,
    World,
    build_world,
)
from tests.playground.conftest import json_error, session_cookie

pytestmark = pytest.mark.django_db


# --- the matrix ---------------------------------------------------------------------------

ROSTER = Upload("roster.csv", b"newperson\n")
DATASET = Upload("extra.csv", b"x\n1\n")
USE_COURSE_DATASET = {"runtime": "python", "code": "print(1)", "dataset_ids": ["{dataset}"]}
LATER = "2031-01-01T00:00:00Z"
USE_GRADING_OUTPUT = {"runtime": "python", "code": "print(1)", "output_ids": ["{output}"]}

# (method, path, body): the status for    instructor assistant student classmate outsider anonymous
MATRIX: list[tuple[str, str, Any, tuple[int, ...]]] = [
    # the course
    ("get", C, None,                                            (200, 200, 200, 200, 404, 401)),
    ("patch", C, {"title": "Renamed"},                          (200, 404, 404, 404, 404, 401)),
    ("post", C + "/join-code", {"action": "rotate"},            (200, 404, 404, 404, 404, 401)),
    ("post", C + "/join-code", {"action": "close"},             (200, 404, 404, 404, 404, 401)),
    # its members
    ("get", C + "/members", None,                               (200, 200, 404, 404, 404, 401)),
    ("patch", C + "/members/classmate", {"role": "assistant"},  (200, 404, 404, 404, 404, 401)),
    ("patch", C + "/members/student", {"role": "instructor"},   (200, 404, 404, 404, 404, 401)),
    ("delete", C + "/members/classmate", None,                  (204, 404, 404, 404, 404, 401)),
    ("delete", C + "/members/student", None,                    (204, 404, 404, 404, 404, 401)),
    ("patch", C + "/members/outsider", {"role": "student"},     (404, 404, 404, 404, 404, 401)),
    # invitations
    ("get", C + "/invitations", None,                           (200, 200, 404, 404, 404, 401)),
    ("post", C + "/roster", ROSTER,                             (200, 404, 404, 404, 404, 401)),
    ("post", "/api/invitations/{invitation}/accept", {},        (404, 404, 404, 404, 404, 401)),
    # course datasets: the course's, never anyone's own
    ("get", C + "/datasets", None,                              (200, 200, 200, 200, 404, 401)),
    ("post", C + "/datasets", DATASET,                          (201, 201, 404, 404, 404, 401)),
    # an assistant deletes only what they uploaded (403 for the instructor's: they see it listed)
    ("delete", C + "/datasets/{dataset}", None,                 (204, 403, 404, 404, 404, 401)),
    ("delete", C + "/datasets/{assistant_dataset}", None,       (204, 204, 404, 404, 404, 401)),
    ("delete", C + "/datasets/{other_dataset}", None,           (404, 404, 404, 404, 404, 401)),
    ("get", "/api/datasets/{dataset}", None,                    (404, 404, 404, 404, 404, 401)),
    ("get", "/api/datasets/{dataset}/preview", None,            (404, 404, 404, 404, 404, 401)),
    ("delete", "/api/datasets/{dataset}", None,                 (404, 404, 404, 404, 404, 401)),
    ("post", "/api/runs", USE_COURSE_DATASET,                   (404, 404, 404, 404, 404, 401)),
    # assignments
    ("get", C + "/assignments", None,                           (200, 200, 200, 200, 404, 401)),
    ("post", C + "/assignments", ASSIGNMENT_BODY,               (201, 404, 404, 404, 404, 401)),
    ("get", A, None,                                            (200, 200, 200, 200, 404, 401)),
    ("put", A, ASSIGNMENT_BODY,                                 (200, 404, 404, 404, 404, 401)),
    ("delete", A, None,                                         (204, 404, 404, 404, 404, 401)),
    ("post", A + "/regrade", {},                                (200, 404, 404, 404, 404, 401)),
    ("post", A + "/try", {"code": "print(1)"},                  (201, 201, 201, 201, 404, 401)),
    ("get", "/api/assignments/{other_assignment}", None,        (404, 404, 404, 404, 200, 401)),
    ("post", "/api/assignments/{other_assignment}/try", {"code": "1"}, (404, 404, 404, 404, 201, 401)),
    # submissions
    ("get", A + "/submissions", None,                           (200, 200, 200, 200, 404, 401)),
    ("post", A + "/submissions", {"code": "print(1)"},          (201, 201, 201, 201, 404, 401)),
    ("get", "/api/submissions/{submission}", None,              (200, 200, 200, 404, 404, 401)),
    ("get", "/api/submissions/{other_submission}", None,        (404, 404, 404, 404, 200, 401)),
    # the gradebook, and a student's every attempt
    ("get", C + "/gradebook", None,                             (200, 200, 404, 404, 404, 401)),
    ("get", C + "/gradebook.csv", None,                         (200, 200, 404, 404, 404, 401)),
    ("get", C + "/gradebook.csv?tests=true", None,              (200, 200, 404, 404, 404, 401)),
    ("get", C + "/students/student", None,                      (200, 200, 404, 404, 404, 401)),
    ("get", C + "/students/assistant", None,                    (404, 404, 404, 404, 404, 401)),
    # drafts: staff see and try them, no student sees a trace of one
    ("get", D, None,                                            (200, 200, 404, 404, 404, 401)),
    ("get", D + "/submissions", None,                           (200, 200, 404, 404, 404, 401)),
    ("post", D + "/submissions", {"code": "print(1)"},          (201, 201, 404, 404, 404, 401)),
    ("post", D + "/try", {"code": "print(1)"},                  (201, 201, 404, 404, 404, 401)),
    ("get", D + "/publication", None,                           (200, 404, 404, 404, 404, 401)),
    ("post", D + "/publish", {"confirm": True},                 (200, 404, 404, 404, 404, 401)),
    ("post", D + "/publish", {"confirm": False},                (422, 404, 404, 404, 404, 401)),
    ("post", D + "/unpublish", {},                              (200, 404, 404, 404, 404, 401)),
    ("post", A + "/unpublish", {},                              (409, 404, 404, 404, 404, 401)),
    # extensions: the staff's to give
    ("get", A + "/extensions", None,                            (200, 200, 404, 404, 404, 401)),
    ("put", A + "/extensions", {"student": "student", "due_at": LATER}, (200, 200, 404, 404, 404, 401)),
    ("put", A + "/extensions", {"student": "outsider", "due_at": LATER}, (404, 404, 404, 404, 404, 401)),
    ("delete", A + "/extensions/student", None,                 (204, 204, 404, 404, 404, 401)),
    # manual grading: the rubric the instructor's, adjustments the staff's
    ("put", A + "/rubric", {"items": [{"label": "style", "points": -1}]}, (200, 404, 404, 404, 404, 401)),
    ("post", "/api/submissions/{submission}/adjustments", {"points": 2, "comment": "good tests"},
                                                                (201, 201, 404, 404, 404, 401)),
    ("delete", "/api/submissions/{submission}/adjustments/{adjustment}", None, (200, 200, 404, 404, 404, 401)),
    ("post", "/api/submissions/{other_submission}/adjustments", {"points": 2, "comment": "x"},
                                                                (404, 404, 404, 404, 404, 401)),
    # similarity reports: the staff's, each pair opened recorded
    ("post", A + "/similarity", {},                             (202, 202, 404, 404, 404, 401)),
    ("get", A + "/similarity", None,                            (200, 200, 404, 404, 404, 401)),
    ("get", "/api/similarity/{report}", None,                   (200, 200, 404, 404, 404, 401)),
    ("get", "/api/similarity/{report}/pairs/0", None,           (200, 200, 404, 404, 404, 401)),
    ("get", "/api/similarity/{report}/pairs/1", None,           (404, 404, 404, 404, 404, 401)),
    # the student's grading runs: the course's staff only, never the student
    ("get", "/api/runs/{test_run}", None,                       (200, 200, 404, 404, 404, 401)),
    ("get", "/api/runs/{test_run}/log?stream=stdout", None,     (200, 200, 404, 404, 404, 401)),
    ("get", "/api/runs/{test_run}/outputs/result.csv", None,    (200, 200, 404, 404, 404, 401)),
    ("get", "/api/runs/{test_run}/outputs/result.csv/preview", None, (200, 200, 404, 404, 404, 401)),
    ("get", "/api/runs/{check_run}", None,                      (200, 200, 404, 404, 404, 401)),
    ("get", "/api/runs/{check_run}/log?stream=stdout", None,    (200, 200, 404, 404, 404, 401)),
    ("post", "/api/runs/{test_run}/cancel", {},                 (404, 404, 404, 404, 404, 401)),
    ("post", "/api/runs/{test_run}/rerun", {},                  (404, 404, 404, 404, 404, 401)),
    ("post", "/api/runs", USE_GRADING_OUTPUT,                   (404, 404, 404, 404, 404, 401)),
    # the student's own Run-button run of the course: theirs, and the course staff's
    ("get", "/api/runs/{try_run}", None,                        (200, 200, 200, 404, 404, 401)),
    # pages (anonymous: sent to log in)
    ("get", "/courses/{course}/", None,                         (200, 200, 200, 200, 404, 302)),
    ("get", "/courses/{course}/assignments/new/", None,         (200, 404, 404, 404, 404, 302)),
    ("get", "/assignments/{assignment}/", None,                 (200, 200, 200, 200, 404, 302)),
    ("get", "/assignments/{assignment}/edit/", None,            (200, 404, 404, 404, 404, 302)),
    ("get", "/submissions/{submission}/", None,                 (200, 200, 200, 404, 404, 302)),
    ("get", "/assignments/{draft}/", None,                      (200, 200, 404, 404, 404, 302)),
    ("get", "/courses/{course}/students/student/", None,        (200, 200, 404, 404, 404, 302)),
    ("get", "/similarity/{report}/pairs/0/", None,              (200, 200, 404, 404, 404, 302)),
    # the course's LMS page (LTI): its instructor's
    ("get", "/lti/courses/{course}/", None,                     (200, 404, 404, 404, 404, 302)),
    ("post", "/lti/courses/{course}/roster-sync", {},           (302, 404, 404, 404, 404, 302)),
    ("get", "/runs/{test_run}/", None,                          (200, 200, 404, 404, 404, 302)),
    ("get", "/runs/{check_run}/", None,                         (200, 200, 404, 404, 404, 302)),
    ("get", "/runs/{try_run}/", None,                           (200, 200, 200, 404, 404, 302)),
]  # fmt: skip

CASES = [
    pytest.param(method, path, body, role, status, id=f"{method.upper()} {path} as {role}")
    for method, path, body, statuses in MATRIX
    for role, status in zip(ROLES, statuses, strict=True)
]


@pytest.mark.parametrize(("method", "path", "body", "role", "status"), CASES)
def test_access_matrix(world: World, method: str, path: str, body: Any, role: str, status: int) -> None:
    before = world.snapshot()
    response = world.request(role, method, path, body)
    assert response.status_code == status, (response.status_code, response.content[:300])
    if status >= 400 and path.startswith("/api/"):
        error = json_error(response, status)
        assert error["code"] in (
            "not_found",
            "unauthorized",
            "dataset_not_found",
            "output_not_found",
            "instructor_only",
            "confirmation_needed",
            "has_submissions",
        ), error
    if status == 404:
        assert COURSE_TITLE.encode() not in response.content  # a 404 does not even confirm the course
    if status >= 300:
        assert world.snapshot() == before, "a refused request changed something"


def test_the_matrix_covers_every_classroom_operation() -> None:
    """A new operation of the classroom router needs its row here."""
    router = import_module("playground.classroom.api").router

    covered = {(m, "/" + p.split("/", 2)[2].split("?")[0]) for m, p, _, _ in MATRIX if p.startswith("/api/")}
    placeholders = {"{course}": "{course_id}", "{assignment}": "{assignment_id}", "{submission}": "{submission_id}",
                    "{draft}": "{assignment_id}", "{report}": "{report_id}", "/pairs/0": "/pairs/{index}",
                    "/pairs/1": "/pairs/{index}", "{adjustment}": "{adjustment_id}",
                    "/students/student": "/students/{username}",
                    "/students/assistant": "/students/{username}", "/extensions/student": "/extensions/{username}",
                    "{other_assignment}": "{assignment_id}", "{other_submission}": "{submission_id}",
                    "{invitation}": "{invitation_id}", "{dataset}": "{dataset_id}", "{other_dataset}": "{dataset_id}",
                    "{assistant_dataset}": "{dataset_id}",
                    "/classmate": "/{username}", "/student": "/{username}", "/outsider": "/{username}"}  # fmt: skip

    def general(path: str) -> str:
        for specific, name in placeholders.items():
            if not specific.startswith("/"):
                path = path.replace(specific, name)
            elif path.endswith(specific):  # a member's name: the path's last part
                path = path.removesuffix(specific) + name
        return path

    covered = {(m, general(p)) for m, p in covered}
    missing = [
        (method.lower(), path)
        for path, view in router.path_operations.items()
        for operation in view.operations
        for method in operation.methods
        if (method.lower(), "/" + path.lstrip("/")) not in covered
        and path not in ("/courses", "/courses/join", "/invitations")  # any signed-in user's own
    ]
    assert missing == []


# --- grading runs: the course's staff's, each read recorded -------------------------------


def test_the_student_lists_none_of_their_grading_runs(world: World) -> None:
    listed = {r["id"] for r in world.get_json("student", "/api/runs?limit=500")}
    assert listed == {world.ids["try_run"]}
    grading_runs = Run.objects.filter(kind__in=(RunKind.TEST, RunKind.CHECK), owner=world.users["student"])
    assert grading_runs.count() == 7  # a run per test, a check run per checker
    raw = world.request("student", "get", "/api/runs?limit=500").content
    assert all(secret.encode() not in raw for secret in NEVER_FOR_STUDENTS)
    for role in ("instructor", "assistant"):  # staff read the course's runs, but their list is their own
        assert world.get_json(role, "/api/runs") == []


@pytest.mark.parametrize("role", ["instructor", "assistant"])
def test_each_staff_read_of_a_grading_run_is_recorded(world: World, role: str) -> None:
    reads = [
        ("/api/runs/{test_run}", "run record and code (API)", "test_run"),
        ("/api/runs/{test_run}/log?stream=stdout", "log (API)", "test_run"),
        ("/api/runs/{test_run}/outputs/result.csv", "output", "test_run"),
        ("/api/runs/{test_run}/outputs/result.csv/preview", "output preview", "test_run"),
        ("/runs/{test_run}/", "run page", "test_run"),
        ("/api/runs/{check_run}", "run record and code (API)", "check_run"),
        ("/runs/{check_run}/", "run page", "check_run"),
        ("/api/runs/{try_run}", "run record and code (API)", "try_run"),
    ]
    viewer, student = world.users[role], world.users["student"]
    for path, what, run in reads:
        last = StaffAccess.objects.order_by("-id").values_list("id", flat=True).first() or 0
        response = world.request(role, "get", path)
        assert response.status_code == 200, (path, response.content[:200])
        recorded = StaffAccess.objects.filter(id__gt=last)
        assert [(a.staff, a.owner, a.what, str(a.run_id)) for a in recorded] == [
            (viewer, student, what, world.ids[run])
        ], path
    check = world.get_json(role, "/api/runs/{check_run}")
    assert HIDDEN["check"] in json.dumps(check)  # staff see the checker that ran


def test_a_staff_view_of_a_submission_is_recorded_and_the_students_own_is_not(world: World) -> None:
    path = "/api/submissions/{submission}"
    world.get_json("student", path)
    assert not StaffAccess.objects.exists()
    for role in ("instructor", "assistant"):
        world.get_json(role, path)
        access = StaffAccess.objects.order_by("-id").first()
        assert access is not None
        assert (access.staff, access.owner, access.what, access.detail) == (
            world.users[role],
            world.users["student"],
            "submission",
            world.ids["submission"],
        )
    assert StaffAccess.objects.count() == 2
    assert world.request("instructor", "get", "/submissions/{submission}/").status_code == 200
    assert StaffAccess.objects.filter(what="submission").count() == 3


def test_the_student_reading_their_own_course_run_is_not_recorded(world: World) -> None:
    world.get_json("student", "/api/runs/{try_run}")
    world.request("student", "get", "/runs/{try_run}/")
    assert not StaffAccess.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
@pytest.mark.usefixtures("redis_server")
async def test_the_live_output_of_a_grading_run_is_refused_to_its_student() -> None:
    world = await sync_to_async(build_world)()
    for role, allowed in (("student", False), ("classmate", False), ("assistant", True), ("instructor", True)):
        cookie = await sync_to_async(session_cookie)(world.users[role])
        communicator = WebsocketCommunicator(
            application,
            f"/ws/runs/{world.ids['test_run']}/",
            headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")],
        )
        connected, code = await communicator.connect()
        assert connected is allowed, (role, code)
        if connected:
            await communicator.disconnect()
        else:
            assert code == 4404
