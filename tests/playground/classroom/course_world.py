"""The world the classroom's access tests read: a course with every role (instructor, assistant,
student, classmate, a student of another course, anonymous), an assignment with visible and hidden
tests graded, datasets, runs, a draft, an adjustment and a similarity report; each one's id, and
a client per role (World)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

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
    Submission,
    SubmissionState,
    TestResult,
)
from playground.models import TestStatus as ResultStatus
from playground.services import datasets as dataset_services
from tests.playground.conftest import api
from tests.playground.factories import stored_logs

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


# The world's course, assignment and draft, as paths its ids fill in.
C, A, D = "/api/courses/{course}", "/api/assignments/{assignment}", "/api/assignments/{draft}"
