"""Grading for real: submissions through the API, each test its own run on a real Celery worker
and the namespace engine, check programs in sandboxes of their own."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.core.files.storage import default_storage
from django.test import Client

from playground.models import Run, RunKind, Submission, TestResult
from tests.playground.conftest import api
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]

DOUBLE = "print(int(input()) * 2)\n"


def post(client: Client, path: str, body: dict[str, Any], status: int = 201) -> dict[str, Any]:
    response = client.post(path, json.dumps(body), content_type="application/json")
    assert response.status_code == status, response.content
    return response.json()


def course_with(instructor: Client, tests: list[dict[str, Any]], **assignment: Any) -> tuple[str, str, str]:
    """(course id, join code, assignment id)"""
    course = post(instructor, "/api/courses", {"title": "Programming 1"})
    body = {"title": "Double it", "runtime": "python", "starter_code": "", "tests": tests,
            "limits": {"wall_timeout_s": 5}, "publish": True, **assignment}  # fmt: skip
    created = post(instructor, f"/api/courses/{course['id']}/assignments", body)
    return course["id"], course["join_code"], created["id"]


def joined(join_code: str) -> tuple[Any, Client]:
    user = UserFactory()
    client = api(user)
    post(client, "/api/courses/join", {"join_code": join_code})
    return user, client


def wait_graded(client: Client, submission_id: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found: dict[str, Any] = client.get(f"/api/submissions/{submission_id}").json()
        if found["state"] in ("graded", "not_graded"):
            return found
        time.sleep(0.2)
    raise AssertionError(f"submission {submission_id} was not graded: {found}")


def by_name(submission: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in submission["tests"]}


@pytest.mark.usefixtures("worker")
def test_a_hanging_test_times_out_alone_and_the_others_keep_their_points() -> None:
    instructor = api(UserFactory())
    solution = "import sys\nn = int(input())\nif n == 7:\n    while True: pass\nprint(n * 2)\n"
    tests = [
        {"name": "two", "points": 1, "stdin": "2\n", "expected_stdout": "4"},
        {"name": "seven hangs", "points": 5, "stdin": "7\n", "expected_stdout": "14"},
        {"name": "hidden", "points": 2, "visibility": "hidden", "stdin": "21\n", "expected_stdout": "42"},
        {"name": "args", "points": 1, "args": ["x", "y z"], "stdin": "1",
         "check_code": "import json\ns = json.load(open('/input/status.json'))\n"
                       "out = open('/input/stdout').read()\nprint('saw', repr(out))\n"
                       "raise SystemExit(0 if s['outcome'] == 'succeeded' and out.strip() == '2' else 1)"},
    ]  # fmt: skip
    _, code, assignment = course_with(instructor, tests, limits={"wall_timeout_s": 2, "cpu_time_s": 10})
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": solution})
    started = time.monotonic()
    graded = wait_graded(student, submitted["id"])
    tests_out = by_name(graded)
    assert graded["state"] == "graded" and graded["charged"] is True, graded
    assert tests_out["seven hangs"]["status"] == "timed_out"
    assert "ran out of time" in tests_out["seven hangs"]["status_text"]
    assert tests_out["two"]["status"] == "passed" and tests_out["hidden"]["status"] == "passed"
    assert tests_out["args"]["status"] == "passed" and "saw '2\\n'" in tests_out["args"]["feedback"]
    assert graded["score"] == 4 and graded["max_score"] == 9
    # each test was its own run: the hang did not hold the others to its deadline
    runs = Run.objects.filter(kind=RunKind.TEST, test_results__submission_id=submitted["id"])
    assert runs.count() == 4 and runs.filter(outcome="timed_out").count() == 1
    assert all(r.wall_s is not None and r.wall_s < 1.5 for r in runs.exclude(outcome="timed_out"))
    assert time.monotonic() - started < 60
    # the check program's copies of the student's results went with its end
    check = TestResult.objects.get(submission_id=submitted["id"], name="args").check_run
    assert check is not None and [f["name"] for f in check.staged_files][:2] == ["status.json", "stdin"]
    assert [f["path"] for f in check.staged_files if default_storage.exists(f["path"])] == []


@pytest.mark.usefixtures("worker")
def test_student_code_finds_no_hidden_test_anywhere_in_its_sandbox() -> None:
    """The program searches every readable file for the hidden expectation and checker; it
    finds neither, and the student's view of the result does not show them either."""
    instructor = api(UserFactory())
    secret, checker_mark = "SECRET-EXPECTED-7f3a9c", "CHECKER-MARK-51b2"
    search = "\n".join([
        "import os, sys",
        # reversed, so that the program's own source does not hold what it looks for
        f"needles = [n[::-1].encode() for n in ('{secret[::-1]}', '{checker_mark[::-1]}')]",
        "found, scanned = [], 0",
        "for top in ('/',):",
        "    for root, dirs, files in os.walk(top):",
        "        if root.startswith(('/proc', '/sys', '/dev')):",
        "            dirs[:] = []; continue",
        "        for name in files:",
        "            path = os.path.join(root, name)",
        "            try:",
        "                with open(path, 'rb') as f: data = f.read(1 << 22)",
        "            except OSError: continue",
        "            scanned += 1",
        "            found += [path for n in needles if n in data]",
        "env = repr(dict(os.environ)).encode() + b' '.join(a.encode() for a in sys.argv)",
        "found += ['environ/argv' for n in needles if n in env]",
        "print('scanned', scanned, 'found', found)",
    ])  # fmt: skip
    tests = [
        {"name": "visible", "stdin": "", "expected_stdout": "nothing", "match": "regex"},
        {"name": "hidden expectation", "visibility": "hidden", "expected_stdout": secret},
        {"name": "hidden checker", "visibility": "hidden", "check_code": f"# {checker_mark}\nraise SystemExit(1)"},
    ]
    _, code, assignment = course_with(instructor, tests, limits={"wall_timeout_s": 20, "cpu_time_s": 20})
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": search})
    graded = wait_graded(student, submitted["id"], timeout=150)
    assert graded["state"] == "graded", graded
    for result in TestResult.objects.filter(submission_id=submitted["id"]).select_related("run"):
        assert result.run is not None
        stdout = _log(result.run)
        assert "found []" in stdout, stdout
        assert int(stdout.split()[1]) > 100, "the search read the sandbox's files"
    text = json.dumps(graded) + json.dumps(student.get(f"/api/assignments/{assignment}").json())
    assert secret not in text and checker_mark not in text
    assert {t["status"] for t in graded["tests"][1:]} == {"failed"}


def _log(run: Run) -> str:
    from playground.selectors.runs import run_log_read

    return run_log_read(run=run, stream="stdout", offset=0, limit=1 << 20)[0].decode()


@pytest.mark.usefixtures("worker")
def test_a_sandbox_error_is_retried_not_charged_and_the_student_is_told(settings: Any) -> None:
    """A course that requires microVMs, on a host that serves none: every grading run is refused
    for capacity; the submission is not graded, not charged, and says why."""
    from playground.selectors.hosts import live_engines

    if "smolvm" in live_engines():
        pytest.skip("a live host here serves microVMs, so a require_vm course is graded for real")
    instructor = api(UserFactory())
    course_id, code, assignment = course_with(instructor, [{"name": "t", "expected_stdout": "4", "stdin": "2"}],
                                              attempts_allowed=1)  # fmt: skip
    response = instructor.patch(f"/api/courses/{course_id}", json.dumps({"require_vm": True}),
                                content_type="application/json")  # fmt: skip
    assert response.status_code == 200, response.content
    _, student = joined(code)
    first = post(student, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE})
    graded = wait_graded(student, first["id"])
    assert graded["state"] == "not_graded" and graded["charged"] is False and graded["score"] is None
    assert "does not count" in graded["note"]
    # the one attempt allowed is still there
    response = instructor.patch(f"/api/courses/{course_id}", json.dumps({"require_vm": False}),
                                content_type="application/json")  # fmt: skip
    second = post(student, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE})
    graded = wait_graded(student, second["id"])
    assert graded["state"] == "graded" and graded["score"] == 1 and graded["charged"] is True
    refused = student.post(f"/api/assignments/{assignment}/submissions", json.dumps({"code": DOUBLE}),
                           content_type="application/json")  # fmt: skip
    assert refused.status_code == 422 and refused.json()["code"] == "no_attempts_left"


@pytest.mark.usefixtures("worker")
def test_a_sandbox_error_of_a_grading_run_is_run_again_by_the_grader() -> None:
    """A grading run that ends in sandbox_error (here: finished so by hand, as the reaper does a
    lost worker's) goes back to the queue and is graded on its next try, uncharged until then."""
    from playground.classroom import grading_settle
    from playground.services.runs import record_event

    instructor = api(UserFactory())
    _, code, assignment = course_with(instructor, [{"name": "t", "expected_stdout": "4", "stdin": "2"}])
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": "import time\ntime.sleep(3)\n"
                                                                                     + DOUBLE})  # fmt: skip
    deadline = time.monotonic() + 30
    result = TestResult.objects.get(submission_id=submitted["id"])
    while result.run_id is None and time.monotonic() < deadline:
        time.sleep(0.05)
        result.refresh_from_db()
    assert result.run is not None
    Run.objects.filter(id=result.run.id).update(state="finished", outcome="sandbox_error", error_code="lost_worker")
    record_event(run=result.run, state="finished", detail={"outcome": "sandbox_error"})
    grading_settle.settle()
    submission = Submission.objects.get(id=submitted["id"])
    assert submission.charged is None and "does not count against you" in submission.note
    graded = wait_graded(student, submitted["id"])
    assert graded["state"] == "graded" and graded["score"] == 1 and graded["charged"] is True
    assert TestResult.objects.get(submission_id=submitted["id"]).tries == 2


@pytest.mark.usefixtures("worker")
def test_regrade_grades_every_latest_submission_with_the_changed_tests() -> None:
    instructor = api(UserFactory())
    tests = [{"name": "t", "expected_stdout": "5", "stdin": "2"}]  # a wrong expectation
    _, code, assignment = course_with(instructor, tests)
    students = [joined(code) for _ in range(2)]
    submitted = [post(c, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE}) for _, c in students]
    assert [wait_graded(c, s["id"])["score"] for (_, c), s in zip(students, submitted, strict=True)] == [0, 0]
    body = instructor.get(f"/api/assignments/{assignment}").json()
    body["tests"][0]["expected_stdout"] = "4"
    body["dataset_ids"] = []
    response = instructor.put(f"/api/assignments/{assignment}", json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    assert post(instructor, f"/api/assignments/{assignment}/regrade", {}, status=200) == {"regrading": 2}
    for (_, client), sub in zip(students, submitted, strict=True):
        time.sleep(0.2)
        graded = wait_graded(client, sub["id"])
        assert graded["score"] == 1 and graded["charged"] is True and graded["attempt"] == 1


@pytest.mark.usefixtures("worker")
def test_the_run_button_runs_with_the_course_datasets_and_the_student_sees_it() -> None:
    instructor_user = UserFactory()
    instructor = api(instructor_user)
    course = post(instructor, "/api/courses", {"title": "Data"})
    from tests.playground.test_runs_end_to_end import _upload, wait_finished

    upload = instructor.post(f"/api/courses/{course['id']}/datasets", {"file": _upload("people.csv", b"a\n1\n2\n")})
    assert upload.status_code == 201, upload.content
    body = {"title": "Count", "runtime": "python", "dataset_ids": [upload.json()["id"]],
            "tests": [{"name": "rows", "expected_stdout": "3"}], "publish": True}  # fmt: skip
    assignment = post(instructor, f"/api/courses/{course['id']}/assignments", body)["id"]
    _, student = joined(course["join_code"])
    program = "import sys\nprint(len(open('/input/people.csv').read().split()), sys.argv[1:], input())"
    run = post(student, f"/api/assignments/{assignment}/try", {"code": program, "stdin": "hi", "args": ["-v"]})
    finished = wait_finished(student, run["id"])
    assert finished["outcome"] == "succeeded", finished
    log = student.get(f"/api/runs/{run['id']}/log?stream=stdout").json()
    assert log["data"].strip() == "3 ['-v'] hi"
    # the student's own dataset list does not show the course's; its file is not theirs to delete
    assert student.get("/api/datasets").json() == []
    assert student.delete(f"/api/courses/{course['id']}/datasets/{upload.json()['id']}").status_code == 404


def test_grading_slots_go_round_robin_per_student_in_the_order_they_came(
    settings: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, no_worker: None
) -> None:
    """No worker: the queue's own order. A student with five submissions made first gets one test
    run per turn, like the two who came after them; nobody waits behind more than one of theirs."""
    from playground.classroom import grading, grading_queue
    from playground.models import Assignment, Course, Membership
    from playground.services import runs as run_services

    # The runs are made and left queued. No worker: an earlier test's would take them, and its
    # grading loop (every 10 s, with its own slots) would hand out the submissions' runs itself.
    monkeypatch.setattr(run_services, "enqueue", lambda run: None)

    settings.CORDON_GRADING_SLOTS = 0  # everyone submits first (as during a busy spell)
    course = Course.objects.create(title="c", allowed_runtimes=["python"])
    assignment = Assignment.objects.create(course=course, title="a", runtime="python")
    for index in range(3):
        assignment.tests.create(name=f"t{index}", position=index, expected_stdout="4", stdin="2")
    users: list[Any] = [UserFactory() for _ in range(3)]
    flooder, first, second = users
    for user in (flooder, first, second):
        Membership.objects.create(course=course, user=user, role="student")
    for _ in range(5):
        grading.submission_create(user=flooder, assignment=assignment, code=DOUBLE)
    for user in (second, first):  # not in the order of their ids
        grading.submission_create(user=user, assignment=assignment, code=DOUBLE)
    assert not Run.objects.exists()
    settings.CORDON_GRADING_SLOTS = 100
    assert grading_queue.pump() == 21
    runs = list(Run.objects.filter(kind=RunKind.TEST).order_by("created_at", "id").select_related("owner"))
    order = [{flooder.pk: "F", first.pk: "A", second.pk: "B"}[run.owner_id] for run in runs]
    assert "".join(order[:9]) == "FBAFBAFBA", order  # one test run per turn, in the order they came
    assert len(order) == 21 and order[9:] == ["F"] * 12  # then only the flooder is left
    # each test of the flooder's first submission ran before any of their second's
    results = TestResult.objects.filter(submission__student=flooder, run__isnull=False).order_by("run__created_at")
    assert len({r.submission_id for r in list(results)[:3]}) == 1


def test_one_regrade_of_an_assignment_at_a_time_queues_each_latest_submission_once(
    settings: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, no_worker: None
) -> None:
    """20 regrades in a row (the tester's): the first queues each student's latest graded submission
    once, the 19 others are refused with the one under way; the grading runs in flight never pass
    the slots, and the metric counts them as the queue does. Once it is done, a regrade may start."""
    from playground.models import Submission, SubmissionState
    from playground.services import runs as run_services
    from tests.playground.test_operations import _samples, _scraper, _value

    monkeypatch.setattr(run_services, "enqueue", lambda run: None)  # the runs stay queued: no worker
    settings.CORDON_GRADING_SLOTS = 4
    instructor = api(UserFactory())
    tests = [{"name": "a", "expected_stdout": "4", "stdin": "2"}, {"name": "b", "expected_stdout": "6", "stdin": "3"}]
    _, code, assignment = course_with(instructor, tests)
    students = [joined(code)[0] for _ in range(3)]
    for student in students:  # an older graded submission and the latest
        for _ in range(2):
            Submission.objects.create(assignment_id=assignment, student=student, code=DOUBLE,
                                      state=SubmissionState.GRADED, score=0, max_score=2)  # fmt: skip
    path = f"/api/assignments/{assignment}/regrade"
    assert post(instructor, path, {}, status=200) == {"regrading": 3}
    for _ in range(19):
        refused = post(instructor, path, {}, status=409)
        assert refused["code"] == "regrade_in_progress"
        assert "under way: 3 submissions are still being graded again" in refused["message"], refused
    again = Submission.objects.filter(assignment_id=assignment, regraded__gt=0)
    assert again.count() == 3 and set(again.values_list("regraded", flat=True)) == {1}
    assert TestResult.objects.filter(submission__assignment_id=assignment).count() == 3 * 2  # once each
    grading = Run.objects.filter(kind=RunKind.TEST)
    assert grading.count() == 4  # the slots: the other two wait
    scraped = _samples(_scraper())
    queue = "cordon_grading_queue_depth"
    assert (_value(scraped, queue, state="in_flight"), _value(scraped, queue, state="waiting")) == (4, 2)
    # A test that ran and whose check waits for a slot is waiting, not in flight.
    TestResult.objects.filter(run__in=grading[:1]).update(status="checking")
    grading.filter(id__in=grading[:1]).update(state="finished", outcome="succeeded")
    scraped = _samples(_scraper())
    assert (_value(scraped, queue, state="in_flight"), _value(scraped, queue, state="waiting")) == (3, 3)
    again.update(state=SubmissionState.GRADED)  # the regrade is done
    assert post(instructor, path, {}, status=200) == {"regrading": 3}


def test_a_regrade_the_grader_cannot_run_keeps_the_attempt_counted_and_says_so(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graded attempt stays counted when its regrade fails for the infrastructure's reasons."""
    from playground.classroom import grading, grading_queue
    from playground.errors import ServiceError
    from playground.models import Assignment, Course, Membership, SubmissionState

    course = Course.objects.create(title="c", allowed_runtimes=["python"])
    assignment = Assignment.objects.create(course=course, title="a", runtime="python")
    assignment.tests.create(name="t", expected_stdout="4", stdin="2")
    student: Any = UserFactory()
    Membership.objects.create(course=course, user=student, role="student")
    graded = Submission.objects.create(assignment=assignment, student=student, code=DOUBLE, state="graded",
                                       score=1, max_score=1, charged=True)  # fmt: skip

    def no_host(engine: str) -> str:  # as dispatch answers when no live host serves the engine
        raise ServiceError("engine_unavailable", "no live worker host serves the smolvm engine", status=503)

    monkeypatch.setattr(grading_queue, "choose_queue", no_host)
    assert grading.regrade(assignment=assignment) == 1
    graded.refresh_from_db()
    assert graded.state == SubmissionState.NOT_GRADED and graded.charged is True and graded.score is None
    assert graded.note.startswith("the regrade failed on 't'") and graded.regraded == 1


@pytest.mark.usefixtures("worker")
def test_each_way_of_failing_a_test_says_what_happened_in_plain_words() -> None:
    """A wrong output is not a crash: a program that printed the wrong answer, one that exited
    non-zero (with its status), one a check program refused and a hidden one each read as
    themselves, in the badge (status_text) and in the detail below it."""
    instructor = api(UserFactory())
    refuse = "raise SystemExit(1)"
    tests = [
        {"name": "wrong", "stdin": "2\n", "expected_stdout": "4"},
        {"name": "exits", "stdin": "0\n", "expected_stdout": "0"},
        {"name": "checked", "stdin": "2\n", "check_code": refuse},
        {"name": "hidden", "visibility": "hidden", "stdin": "3\n", "expected_stdout": "6"},
    ]
    _, code, assignment = course_with(instructor, tests)
    _, student = joined(code)
    solution = "n = int(input())\nif n == 0:\n    raise SystemExit(3)\nprint(n + 1)\n"
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": solution})
    results = by_name(wait_graded(student, submitted["id"]))
    words = {name: (t["status"], t["status_text"], t.get("detail")) for name, t in results.items()}
    wrong = "failed: the output was not what was expected"
    assert words == {
        "wrong": ("failed", wrong, wrong),
        "exits": ("failed", "failed: the program exited with an error (exit status 3)",
                  "failed: the program exited with an error (exit status 3)"),
        "checked": ("failed", "failed: the check program did not accept the output",
                    "failed: the check program did not accept the output"),
        "hidden": ("failed", "failed (a hidden test: how it failed is not shown)", None),
    }  # fmt: skip
    staff = by_name(wait_graded(instructor, submitted["id"]))
    assert staff["hidden"]["status_text"] == wrong


@pytest.mark.usefixtures("worker")
def test_a_student_sees_their_crash_on_a_visible_test_and_the_staff_see_every_tests_streams() -> None:
    """As Gradescope shows it: the end of the program's stderr (its traceback) under a visible test it
    failed; nothing of a hidden test's; the staff see every test's stdout and stderr."""
    instructor = api(UserFactory())
    tests = [
        {"name": "crash", "stdin": "0\n", "expected_stdout": "0"},
        {"name": "passes", "stdin": "2\n", "expected_stdout": "3"},
        {"name": "secret", "visibility": "hidden", "stdin": "0\n", "expected_stdout": "0"},
    ]
    _, code, assignment = course_with(instructor, tests)
    _, student = joined(code)
    solution = "import sys\nn = int(input())\nprint('working on', n, file=sys.stderr)\nprint(n + 1)\n"
    solution += "if not n:\n    print(1 // n)\n"
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": solution})
    mine = by_name(wait_graded(student, submitted["id"]))
    crash = mine["crash"]["stderr_tail"]
    assert crash.startswith("working on 0\nTraceback (most recent call last):"), crash
    assert crash.rstrip().endswith("ZeroDivisionError: integer division or modulo by zero"), crash
    assert mine["passes"]["stderr_tail"] is None  # passed: nothing to explain
    assert mine["secret"]["stderr_tail"] is None and mine["secret"]["stdout"] is None  # hidden: silent
    assert all(t["stdout"] is None and t["stderr"] is None for t in mine.values())  # the staff's alone
    staff = by_name(wait_graded(instructor, submitted["id"]))
    assert staff["secret"]["stdout"] == "1\n" and "ZeroDivisionError" in staff["secret"]["stderr"]
    assert (staff["passes"]["stdout"], staff["passes"]["stderr"]) == ("3\n", "working on 2\n")


@pytest.mark.django_db(transaction=True)
def test_the_migration_rewords_results_stored_as_a_crash_that_were_not_one() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("playground", "0014_notebook_runs_version")], [("playground", "0015_result_words")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    course = old.get_model("playground", "Course").objects.create(title="c", created_by=user)
    assignment = old.get_model("playground", "Assignment").objects.create(course=course, title="a", runtime="python")
    submission = old.get_model("playground", "Submission").objects.create(assignment=assignment, student=user, code="1")
    crash = "failed: the program exited with an error"
    stored = {  # name: (outcome, exit_code, spec, detail)
        "wrong": ("succeeded", 0, {}, crash),
        "refused": ("succeeded", 0, {"check_code": "raise SystemExit(1)"}, crash),
        "exited": ("failed", 2, {}, crash),
        "timed out": ("timed_out", None, {}, "failed: the program ran out of time"),
    }
    for name, (outcome, exit_code, spec, detail) in stored.items():
        old.get_model("playground", "TestResult").objects.create(
            submission=submission, name=name, visibility="visible", status="failed" if name != "timed out" else outcome,
            outcome=outcome, exit_code=exit_code, spec=spec, detail=detail,
        )  # fmt: skip
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    try:
        results = executor.loader.project_state(after).apps.get_model("playground", "TestResult").objects
        details = dict(results.values_list("name", "detail"))
    finally:  # the later migrations back, for the tests that follow on this database
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert details == {
        "wrong": "failed: the output was not what was expected",
        "refused": "failed: the check program did not accept the output",
        "exited": "failed: the program exited with an error (exit status 2)",
        "timed out": "failed: the program ran out of time",
    }
