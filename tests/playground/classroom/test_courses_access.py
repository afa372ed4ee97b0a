"""Who may do what in a course: every classroom endpoint as the instructor, an assistant, the
submitting student, a classmate, a student of another course and an anonymous caller, read as one
matrix; grading runs that only the course's staff may read (each read recorded); hidden tests whose
details reach no student, before or after grading."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from playground.asgi import application
from playground.classroom import adjustments, grading, grading_results
from playground.classroom import courses as course_services
from playground.models import (
    Assignment,
    Course,
    CourseInvitation,
    Dataset,
    Extension,
    Membership,
    Role,
    RubricItem,
    Run,
    RunKind,
    RunOutputFile,
    RunState,
    ScoreAdjustment,
    SimilarityReport,
    StaffAccess,
    Submission,
    SubmissionState,
    TestResult,
)
from playground.models import TestStatus as ResultStatus
from playground.services import datasets as dataset_services
from tests.playground.conftest import api, json_error, session_cookie
from tests.playground.factories import stored_logs

pytestmark = pytest.mark.django_db

ROLES = ("instructor", "assistant", "student", "classmate", "outsider", "anonymous")
COURSE_TITLE = "Programming 1 (PX7Q)"

# Distinctive strings a student may see (visible) and may not (hidden, a checker, after_due before the due time).
VISIBLE = {"stdin": "VISIBLE-STDIN-1a2b", "arg": "VISIBLE-ARG-5e5e", "expected": "VISIBLE-EXPECTED-3c4d"}
VISIBLE_CHECK = "VISIBLE-CHECK-6e6e"  # a visible test's check program: still never shown to a student
HIDDEN_FEEDBACK = "HIDDEN-FEEDBACK-c0de"  # what a hidden test's checker printed
HIDDEN = {
    "stdin": "HIDDEN-STDIN-4e1f", "arg": "HIDDEN-ARG-9c2d", "expected": "HIDDEN-EXPECTED-77ab",
    "checker stdin": "HIDDEN-CHECKER-STDIN-2b2b", "check": "HIDDEN-CHECK-3f0e",
}  # fmt: skip
AFTER_DUE = {"stdin": "AFTERDUE-STDIN-5b6c", "arg": "AFTERDUE-ARG-8a8a", "expected": "AFTERDUE-EXPECTED-0d1e"}
NEVER_FOR_STUDENTS = [*HIDDEN.values(), VISIBLE_CHECK, HIDDEN_FEEDBACK]

TESTS: list[dict[str, Any]] = [
    {"name": "visible", "points": 1, "stdin": VISIBLE["stdin"], "args": [VISIBLE["arg"]],
     "expected_stdout": VISIBLE["expected"]},
    {"name": "visible checker", "points": 1, "check_code": f"# {VISIBLE_CHECK}\nraise SystemExit(0)"},
    {"name": "hidden", "points": 2, "visibility": "hidden", "stdin": HIDDEN["stdin"], "args": [HIDDEN["arg"]],
     "expected_stdout": HIDDEN["expected"]},
    {"name": "hidden checker", "points": 1, "visibility": "hidden", "stdin": HIDDEN["checker stdin"],
     "check_code": f"# {HIDDEN['check']}\nraise SystemExit(1)"},
    {"name": "after due", "points": 1, "visibility": "after_due", "stdin": AFTER_DUE["stdin"],
     "args": [AFTER_DUE["arg"]], "expected_stdout": AFTER_DUE["expected"]},
]  # fmt: skip

ASSIGNMENT_BODY: dict[str, Any] = {
    "title": "Another one", "runtime": "python", "tests": [{"name": "t", "stdin": "2", "expected_stdout": "4"}],
}  # fmt: skip


def person(username: str) -> User:
    """A user with no usable password (fast: no hashing); they call the API with a token."""
    return User.objects.create_user(username=username, email=f"{username}@example.com", password=None)


def assignment_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "title": "Double it", "instructions": "Print **twice** the number.", "runtime": "python",
        "starter_code": "", "dataset_ids": [], "limits": {"wall_timeout_s": 5}, "opens_at": None,
        "due_at": timezone.now() + timedelta(days=7), "attempts_allowed": 0, "accept_late": False, "tests": TESTS,
        "publish": True,
    }  # fmt: skip
    return {**data, **changes}


def finished_run(*, owner: User, course: Course, kind: str, code: str, **fields: Any) -> Run:
    return Run.objects.create(
        owner=owner, course=course, kind=kind, runtime="python", code=code, state=RunState.FINISHED,
        finished_at=timezone.now(), **fields,
    )  # fmt: skip


def grade(submission: Submission) -> None:
    """Finish grading by hand, as the grader leaves it: each test a finished grading run of the
    student's code (and a check run where the test has a checker), every test failed, the
    expectations in the diffs and each checker's verdict in its feedback."""
    course = submission.assignment.course
    for result in submission.results.all():
        spec = result.spec
        run = finished_run(
            owner=submission.student, course=course, kind=RunKind.TEST, code=submission.code, stdin=spec["stdin"],
            args=spec["args"], outcome="succeeded", exit_code=0,
        )  # fmt: skip
        stored_logs(run.id, stdout=b"wrong\n")
        changes: dict[str, Any] = {"run": run, "outcome": "succeeded", "exit_code": 0, "tries": 1,
                                   "status": ResultStatus.FAILED, "score": 0.0, "finished_at": timezone.now(),
                                   "detail": grading_results.WRONG_OUTPUT}  # fmt: skip
        if spec["check_code"]:
            check = finished_run(
                owner=submission.student, course=course, kind=RunKind.CHECK, code=spec["check_code"],
                outcome="failed", exit_code=1,
            )  # fmt: skip
            feedback = HIDDEN_FEEDBACK if result.visibility == "hidden" else "the checker said no"
            stored_logs(check.id, stdout=feedback.encode())
            changes.update(check_run=check, feedback=feedback)
        else:
            changes["diff"] = f"--- expected\n+++ your output\n-{spec['expected_stdout']}\n+wrong\n"
        TestResult.objects.filter(id=result.id).update(**changes)
    Submission.objects.filter(id=submission.id).update(
        state=SubmissionState.GRADED, score=0.0, charged=True, graded_at=timezone.now()
    )


@dataclass(frozen=True)
class Upload:
    """A multipart body: one file in the field `file`."""

    name: str
    data: bytes


@dataclass
class World:
    """One course with its staff, two students, an assignment with every kind of test, a graded
    submission (its grading runs and their log and output), a course dataset and an invitation;
    and another course with a student of its own (the outsider)."""

    users: dict[str, User]
    ids: dict[str, str]
    clients: dict[str, Client] = field(default_factory=dict)

    def client(self, role: str) -> Client:
        if role not in self.clients:
            if role == "anonymous":
                self.clients[role] = Client()
            else:
                self.clients[role] = api(self.users[role])
                self.clients[role].force_login(self.users[role])  # the pages: a browser session besides
        return self.clients[role]

    def request(self, role: str, method: str, path: str, body: Any = None) -> Any:
        client, path = self.client(role), path.format(**self.ids)
        if isinstance(body, Upload):
            return client.post(path, {"file": SimpleUploadedFile(body.name, body.data, content_type="text/csv")})
        if body is None:
            return client.generic(method.upper(), path)
        return client.generic(method.upper(), path, json.dumps(filled(body, self.ids)), "application/json")

    def get_json(self, role: str, path: str) -> Any:
        response = self.request(role, "get", path)
        assert response.status_code == 200, (role, path, response.status_code, response.content[:300])
        return response.json()

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a refused request must leave as it was."""
        course = Course.objects.get(id=self.ids["course"])
        return (
            course.title, course.join_code, course.allowed_runtimes,
            sorted(Membership.objects.values_list("course_id", "user__username", "role")),
            sorted(Assignment.objects.values_list("id", "title", "tests_version")),
            sorted(Dataset.objects.values_list("id", "name")),
            sorted(CourseInvitation.objects.values_list("course_id", "identifier", "accepted_at")),
            sorted(Submission.objects.values_list("id", "state", "score", "adjustment")),
            Run.objects.count(), TestResult.objects.count(),
            sorted(Assignment.objects.values_list("id", "published_at")),
            sorted(Extension.objects.values_list("assignment_id", "student_id", "due_at")),
            sorted(ScoreAdjustment.objects.values_list("id", "withdrawn_at")),
            sorted(RubricItem.objects.values_list("assignment_id", "label", "points")),
            SimilarityReport.objects.count(),
        )  # fmt: skip


def filled(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return int(ids["output"]) if value == "{output}" else value.format(**ids)  # an output's id is a number
    if isinstance(value, list):
        return [filled(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: filled(v, ids) for k, v in value.items()}
    return value


def build_world() -> World:
    users = {role: person(role) for role in ROLES if role != "anonymous"}
    course = course_services.course_create(user=users["instructor"], title=COURSE_TITLE)
    for role, as_role in (("assistant", Role.ASSISTANT), ("student", Role.STUDENT), ("classmate", Role.STUDENT)):
        Membership.objects.create(course=course, user=users[role], role=as_role)
    other_teacher = person("otherteacher")
    other = course_services.course_create(user=other_teacher, title="Another course")
    Membership.objects.create(course=other, user=users["outsider"], role=Role.STUDENT)

    def upload(by: User, to: Course, name: str) -> Dataset:
        file = SimpleUploadedFile(name, b"name,age\nada,36\n", content_type="text/csv")
        return dataset_services.dataset_create(user=by, upload=file, course=to)

    dataset, other_dataset = upload(users["instructor"], course, "people.csv"), upload(other_teacher, other, "o.csv")
    assistant_dataset = upload(users["assistant"], course, "helper.csv")
    assignment = course_services.assignment_save(course=course, data=assignment_data(dataset_ids=[dataset.id]))
    other_assignment = course_services.assignment_save(
        course=other, data=assignment_data(title="Elsewhere", tests=ASSIGNMENT_BODY["tests"])
    )
    submission = grading.submission_create(user=users["student"], assignment=assignment, code="print('mine')")
    grade(submission)
    test_run = TestResult.objects.get(submission=submission, name="hidden").run
    check_run = TestResult.objects.get(submission=submission, name="hidden checker").check_run
    assert test_run is not None and check_run is not None
    output = RunOutputFile.objects.create(run=test_run, name="result.csv", size=8, sha256="0" * 64)
    output.file.save("result", ContentFile(b"a,b\n1,2\n"))
    other_submission = grading.submission_create(user=users["outsider"], assignment=other_assignment, code="1")
    draft_dataset = upload(users["instructor"], course, "draft-only.csv")
    draft = course_services.assignment_save(
        course=course, data=assignment_data(title="Not yet", publish=False, dataset_ids=[draft_dataset.id])
    )
    adjustment = adjustments.adjustment_add(submission=submission, by=users["instructor"], points=1, comment="tidy")
    side = {"key": str(submission.id), "student": "student", "similarity": 0.9, "matched_tokens": 9,
            "regions": [{"start": 0, "end": 5, "first_line": 1, "last_line": 1}]}  # fmt: skip
    report = SimilarityReport.objects.create(assignment=assignment, threshold=0.5, state="done",
                                             pairs=[{"a": side, "b": side}])  # fmt: skip
    try_run = finished_run(owner=users["student"], course=course, kind=RunKind.RUN, code="print('trying')")
    invitation = CourseInvitation.objects.create(course=course, identifier="newcomer", created_by=users["instructor"])
    ids = {
        "course": course.id, "other_course": other.id, "assignment": assignment.id,
        "other_assignment": other_assignment.id, "submission": submission.id,
        "other_submission": other_submission.id, "dataset": dataset.id, "other_dataset": other_dataset.id,
        "assistant_dataset": assistant_dataset.id,
        "test_run": test_run.id, "check_run": check_run.id, "try_run": try_run.id, "invitation": invitation.id,
        "output": output.id, "draft": draft.id, "draft_dataset": draft_dataset.id, "adjustment": adjustment.id,
        "report": report.id,
    }  # fmt: skip
    return World(users=users, ids={k: str(v) for k, v in ids.items()})


@pytest.fixture
def world() -> World:
    return build_world()


# --- the matrix ---------------------------------------------------------------------------

C, A, D = "/api/courses/{course}", "/api/assignments/{assignment}", "/api/assignments/{draft}"
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
