"""No user can stall the others: the work Cordon does on a user's input outside the sandbox (matching
a test's pattern, diffing, rendering markdown) is capped before it starts, bounded while it runs,
settled result by result, and done where it holds up nobody else's run; submissions and join codes
are rate-limited. Each test here failed on the code a security tester broke (issue 27)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from playground import markdown
from playground.models import Run, RunKind, Submission, TestResult
from runner import bounded
from tests.playground.classroom.test_grading import DOUBLE, course_with, joined, post, wait_graded
from tests.playground.conftest import SharedWorker, Worker, api, json_error
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def assignment_body(tests: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"title": "Patterns", "runtime": "python", "tests": tests, "limits": {"wall_timeout_s": 5}, "publish": True,
            **more}  # fmt: skip


def new_course(client: Client) -> str:
    return str(post(client, "/api/courses", {"title": "Programming 1"})["id"])


# --- patterns: capped at save, RE2, never a 500 ---------------------------------------------


def test_a_regex_test_over_the_pattern_cap_is_refused_at_save_naming_the_test_and_the_cap() -> None:
    instructor = api(UserFactory())
    tests = [{"name": "ok", "expected_stdout": "4"},
             {"name": "huge pattern", "expected_stdout": "a" * 140_000, "match": "regex"}]  # fmt: skip
    response = instructor.post(f"/api/courses/{new_course(instructor)}/assignments",
                               json.dumps(assignment_body(tests)), content_type="application/json")  # fmt: skip
    error = json_error(response, 422)
    assert error["field"] == "tests.1.expected_stdout"
    assert "'huge pattern'" in error["message"] and "at most 16 KiB" in error["message"]


def test_a_deeply_nested_pattern_is_no_500_and_matches_as_written() -> None:
    instructor = api(UserFactory())
    nested = "(" * 1000 + "a" + ")" * 1000  # Python's re: RecursionError, a 500
    tests = [{"name": "nested", "expected_stdout": nested, "match": "regex"}]
    response = instructor.post(f"/api/courses/{new_course(instructor)}/assignments",
                               json.dumps(assignment_body(tests)), content_type="application/json")  # fmt: skip
    assert response.status_code == 201, response.content
    from playground.classroom.grading_compare import compare

    assert compare("a\n", nested, "regex").passed and compare("b", nested, "regex").status == "failed"


@pytest.mark.parametrize(
    ("pattern", "words"), [("(?=a)a", "invalid perl operator"), (r"(a)\1", "invalid escape sequence"), ("(", "missing")]
)
def test_a_pattern_re2_does_not_take_is_refused_at_save_in_re2s_words(pattern: str, words: str) -> None:
    instructor = api(UserFactory())
    tests = [{"name": "lookahead", "expected_stdout": pattern, "match": "regex"}]
    response = instructor.post(f"/api/courses/{new_course(instructor)}/assignments",
                               json.dumps(assignment_body(tests)), content_type="application/json")  # fmt: skip
    error = json_error(response, 422)
    assert error["field"] == "tests.0.expected_stdout" and words in error["message"], error


# --- grading goes on, result by result --------------------------------------------------------


@pytest.mark.images
def test_a_result_that_cannot_be_settled_is_not_graded_alone_and_other_courses_are_graded(
    no_worker: None, shared_worker: SharedWorker
) -> None:
    """One result with a pattern from before the cap (140 kB: it stopped every grading pass), one
    whose stored expectation breaks the comparison itself: each is not graded, with its reason; the
    same submission's sound test passes; another course's student is graded as usual."""
    shared_worker.register_host()  # a live host, so that grading runs are made and stay queued
    tests = [{"name": "sound", "stdin": "2\n", "expected_stdout": "4"},
             {"name": "old huge pattern", "stdin": "2\n", "expected_stdout": "4"},
             {"name": "broken expectation", "stdin": "2\n", "expected_stdout": "4"}]  # fmt: skip
    _, code, broken_assignment = course_with(api(UserFactory()), tests)
    _, first = joined(code)
    broken = post(first, f"/api/assignments/{broken_assignment}/submissions", {"code": DOUBLE})
    results = {r.name: r for r in TestResult.objects.filter(submission_id=broken["id"])}
    huge = {**results["old huge pattern"].spec, "expected_stdout": "4" + "\\d?" * 70_000, "match": "regex"}
    TestResult.objects.filter(id=results["old huge pattern"].id).update(spec=huge)
    TestResult.objects.filter(id=results["broken expectation"].id).update(  # hidden: its students never see it
        spec={**results["broken expectation"].spec, "expected_stdout": 4},
        visibility="hidden",  # not text: raises
    )
    _, code, other_assignment = course_with(
        api(UserFactory()), [{"name": "t", "stdin": "21\n", "expected_stdout": "42"}]
    )
    _, second = joined(code)
    other = post(second, f"/api/assignments/{other_assignment}/submissions", {"code": DOUBLE})
    shared_worker.ensure()

    graded = wait_graded(second, other["id"])
    assert graded["state"] == "graded" and graded["score"] == 1
    done = wait_graded(first, broken["id"])
    by_name = {t["name"]: t for t in done["tests"]}
    assert done["state"] == "not_graded" and done["charged"] is False
    assert by_name["sound"]["status"] == "passed"
    assert by_name["old huge pattern"]["status"] == "not_graded"
    assert "at most 16 KiB" in by_name["old huge pattern"]["detail"]
    assert "the instructor's to fix" in by_name["old huge pattern"]["detail"]
    assert by_name["broken expectation"]["status"] == "not_graded"
    detail = TestResult.objects.get(id=results["broken expectation"].id).detail
    assert detail == "grading this test failed on the server (AttributeError); not your code"


def test_the_host_loop_sweeps_when_its_reaper_fails_and_does_no_grading(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground import celery
    from playground.classroom import grading_settle
    from playground.services import hosts, runs

    swept: list[bool] = []
    monkeypatch.setattr(celery, "_register", lambda **_: None)
    monkeypatch.setattr(hosts, "host_beat", lambda **_: None)
    monkeypatch.setattr(runs, "reap", lambda: 1 / 0)
    monkeypatch.setattr(grading_settle, "settle", lambda **_: pytest.fail("grading in the host loop"))
    monkeypatch.setattr(hosts, "host_sweep", lambda: swept.append(True))
    celery.HostLoop(nodename="w@here", queues=["namespace"]).tick(time.monotonic())
    assert swept == [True]


# --- a person's run before grading work ---------------------------------------------------------


@pytest.mark.images
def test_a_persons_run_is_taken_before_grading_runs_queued_ahead_of_it(
    no_worker: None, shared_worker: SharedWorker, worker_env: dict[str, str]
) -> None:
    shared_worker.register_host()
    tests = [{"name": f"t{i}", "stdin": "2\n", "expected_stdout": "4"} for i in range(8)]
    _, code, assignment = course_with(api(UserFactory()), tests)
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE})
    queued_grading = Run.objects.filter(kind=RunKind.TEST, test_results__submission_id=submitted["id"])
    assert queued_grading.count() >= 4  # the grading slots' worth, sent before the person's run
    analyst = api(UserFactory())
    person = post(analyst, "/api/runs", {"runtime": "python", "code": "print('hello')"})
    solo = Worker(worker_env, concurrency=1)  # one task at a time: the order it takes them in shows
    solo.start()
    try:
        wait_graded(student, submitted["id"])
    finally:
        solo.stop()
    started = Run.objects.get(id=person["id"]).started_at
    firsts = sorted(r.started_at for r in queued_grading if r.started_at is not None)
    assert started is not None and firsts and started < firsts[0], (started, firsts[:3])


@pytest.mark.images
def test_a_runs_worker_takes_no_grading_and_a_grading_worker_no_persons_runs(
    no_worker: None, shared_worker: SharedWorker, worker_env: dict[str, str]
) -> None:
    """`make run` starts one of each: a person's run never waits for a pool process held by grading."""
    shared_worker.register_host()
    _, code, assignment = course_with(api(UserFactory()), [{"name": "t", "stdin": "2\n", "expected_stdout": "4"}])
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE})
    analyst = api(UserFactory())
    person = post(analyst, "/api/runs", {"runtime": "python", "code": "print('hello')"})
    runs = Worker({**worker_env, "CORDON_WORKER_QUEUES": "runs"}, concurrency=1, name="runs")
    grader = Worker({**worker_env, "CORDON_WORKER_QUEUES": "grading"}, concurrency=1, name="grading")
    try:
        runs.start()
        wait_until(lambda: Run.objects.get(id=person["id"]).state == "finished", 60, "the person's run")
        time.sleep(1.0)  # time enough for the runs worker to take a grading task, were it to
        grading = Run.objects.filter(kind=RunKind.TEST, test_results__submission_id=submitted["id"])
        assert [(r.state, r.started_at) for r in grading] == [("queued", None)]
        grader.start()
        assert wait_graded(student, submitted["id"])["score"] == 1
        runs.stop()  # the grading worker alone: a person's run waits
        later = post(analyst, "/api/runs", {"runtime": "python", "code": "print('again')"})
        time.sleep(1.0)
        assert Run.objects.get(id=later["id"]).state == "queued"
    finally:
        runs.kill()
        grader.kill()


def test_grading_runs_get_a_tenth_of_a_persons_cpu_weight(no_worker: None, shared_worker: SharedWorker,
                                                          tmp_path: Path) -> None:  # fmt: skip
    from playground.services.execution import run_spec

    shared_worker.register_host()
    _, code, assignment = course_with(api(UserFactory()), [{"name": "t", "stdin": "2\n", "expected_stdout": "4"}])
    _, student = joined(code)
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": DOUBLE})
    grading = Run.objects.get(kind=RunKind.TEST, test_results__submission_id=submitted["id"])
    person = Run.objects.get(id=post(api(UserFactory()), "/api/runs", {"runtime": "python", "code": "1"})["id"])
    assert run_spec(run=grading, staging=tmp_path).cpu_weight == 10
    assert run_spec(run=person, staging=tmp_path).cpu_weight == 100


# --- a matcher never outlives its worker --------------------------------------------------------


def matchers() -> list[int]:
    """Live comparison children (runner.bounded running compare_job), by their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if bounded.MARK.encode() in argv and b"compare_job" in argv and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.images
def test_a_worker_stopped_mid_match_leaves_no_matcher_running(
    no_worker: None, shared_worker: SharedWorker, worker_env: dict[str, str]
) -> None:
    """A pattern that takes RE2 many seconds over a megabyte (the CPU bound raised so that it is
    still matching): killing the pool process leaves no matcher (it dies with its parent); the
    stack stopped as `make run`'s process manager stops it, SIGTERM to the group, leaves none."""
    shared_worker.register_host()
    program = "import random\nr = random.Random(27)\nprint(''.join(r.choice('ab') for _ in range(900_000)))\n"
    tests = [{"name": "slow", "expected_stdout": "(?:.*a.{60}b.*){16}", "match": "regex"}]
    _, code, assignment = course_with(api(UserFactory()), tests)
    _, student = joined(code)
    post(student, f"/api/assignments/{assignment}/submissions", {"code": program})
    stack = Worker({**worker_env, "CORDON_COMPARE_CPU_S": "60"})
    stack.start()
    try:
        first = wait_until(matchers, 60, "a comparison child")[0]
        pool_process = int(Path(f"/proc/{first}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(pool_process, signal.SIGKILL)  # the worker's pool process dies mid-match
        wait_until(lambda: first not in matchers(), 5, "the orphaned matcher to die")
        # The grading loop settles the result again (a new matcher): now the whole stack is stopped.
        second = wait_until(matchers, 60, "the grading loop's comparison child")[0]
        assert second != first
        stack.stop()  # SIGTERM to the worker's process group, then waits for it to exit
        wait_until(lambda: not matchers(), 5, "no matcher left")
    finally:
        stack.kill()
    assert matchers() == []


@pytest.mark.images
@pytest.mark.usefixtures("worker")
def test_twenty_backtracking_patterns_grade_in_linear_time() -> None:
    """(a+)+$ against a's and a b: Python's re took 2 s (its limit) per test, a worker's forty
    seconds for one submission; RE2 answers each at once."""
    tests = [{"name": f"t{i}", "expected_stdout": "(a+)+$", "match": "regex"} for i in range(20)]
    _, code, assignment = course_with(api(UserFactory()), tests)
    _, student = joined(code)
    started = time.monotonic()
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": "print('a' * 5000 + '!')"})
    graded = wait_graded(student, submitted["id"], timeout=120)
    assert graded["state"] == "graded" and {t["status"] for t in graded["tests"]} == {"failed"}
    assert time.monotonic() - started < 30  # was over 40 s of pattern timeouts alone


# --- rates and throttles -------------------------------------------------------------------------


def submit(client: Client, assignment: str) -> Any:
    return client.post(f"/api/assignments/{assignment}/submissions", json.dumps({"code": "print(1)"}),
                       content_type="application/json")  # fmt: skip


def test_back_to_back_submissions_past_the_rate_are_answered_429_with_retry_after(redis_server: Any) -> None:
    _, code, assignment = course_with(api(UserFactory()), [{"name": "t", "expected_stdout": "1"}])
    _, student = joined(code)
    statuses = [submit(student, assignment).status_code for _ in range(30)]
    assert statuses[:6] == [201] * 6 and set(statuses[6:]) == {429}
    refused = submit(student, assignment)
    error = json_error(refused, 429)
    assert error["code"] == "too_many_submissions" and "at most 6 submissions a minute" in error["message"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert Submission.objects.filter(assignment_id=assignment).count() == 6
    _, classmate = joined(code)  # another student is not held back by this one
    assert submit(classmate, assignment).status_code == 201


def test_an_assignments_students_together_are_rate_limited(redis_server: Any, settings: Any) -> None:
    settings.CORDON_SUBMISSIONS_PER_MINUTE_ASSIGNMENT = 3
    _, code, assignment = course_with(api(UserFactory()), [{"name": "t", "expected_stdout": "1"}])
    students = [joined(code)[1] for _ in range(5)]
    assert [submit(s, assignment).status_code for s in students] == [201, 201, 201, 429, 429]
    assert "by all its students" in json_error(submit(students[0], assignment), 429)["message"]


def test_wrong_join_codes_past_the_limit_refuse_even_the_right_one(redis_server: Any, settings: Any) -> None:
    settings.CORDON_JOIN_FAILURES_PER_USER = 5
    instructor = api(UserFactory())
    code = post(instructor, "/api/courses", {"title": "Programming 1"})["join_code"]
    guesser = api(UserFactory())
    statuses = [guesser.post("/api/courses/join", json.dumps({"join_code": f"WRONG{i:03d}"}),
                             content_type="application/json").status_code for i in range(8)]  # fmt: skip
    assert statuses == [404] * 5 + [429] * 3
    right = guesser.post("/api/courses/join", json.dumps({"join_code": code}), content_type="application/json")
    error = json_error(right, 429)
    assert error["code"] == "throttled" and 1 <= int(right["Retry-After"]) <= settings.CORDON_JOIN_THROTTLE_WINDOW_S
    # the page is throttled too, for the same user
    page = Client()
    page.force_login(cast(User, UserFactory()))
    found = [page.get(f"/courses/join/WRONG{i:03d}/").status_code for i in range(7)]
    assert found == [404] * 5 + [429] * 2
    assert b"Too many wrong join codes" in page.get(f"/courses/join/{code}/").content


def test_wrong_join_codes_from_one_address_are_counted_across_users(redis_server: Any, settings: Any) -> None:
    settings.CORDON_JOIN_FAILURES_PER_ADDRESS = 4
    statuses = []
    for i in range(6):  # a new account each time: the per-user count never fills
        statuses.append(api(UserFactory()).post("/api/courses/join", json.dumps({"join_code": f"NOPE{i}"}),
                                                content_type="application/json").status_code)  # fmt: skip
    assert statuses == [404] * 4 + [429] * 2
    elsewhere = Client(REMOTE_ADDR="198.51.100.9")
    elsewhere.force_login(cast(User, UserFactory()))
    assert (
        elsewhere.post("/api/courses/join", {"join_code": "NOPE9"}, content_type="application/json").status_code == 404
    )


# --- markdown: capped, rendered once when saved, in a bounded child ----------------------------


def markdown_cell(cell_id: str, source: str) -> dict[str, Any]:
    return {"id": cell_id, "kind": "markdown", "runtime": "python", "source": source}


def create_notebook(client: Client, cells: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post("/api/notebooks", json.dumps({"name": "notes", "cells": cells}),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 201, response.content
    return dict(response.json())


def save_notebook(client: Client, notebook: dict[str, Any], cells: list[dict[str, Any]]) -> Any:
    body = {"name": notebook["name"], "version": notebook["version"], "cells": cells}
    return client.put(f"/api/notebooks/{notebook['id']}", json.dumps(body), content_type="application/json")


def test_a_markdown_cell_over_its_cap_is_refused_naming_the_cell(redis_server: Any) -> None:
    client = api(UserFactory())
    notebook = create_notebook(client, [markdown_cell("m1", "# fine")])
    cells = [markdown_cell("m1", "# fine"), markdown_cell("m2", "[" * 254_000)]
    error = json_error(save_notebook(client, notebook, cells), 422)
    assert error["code"] == "markdown_too_large" and error["field"] == "cells.1.source"
    assert "cell 2" in error["message"] and "at most 64 KiB" in error["message"]


def test_instructions_over_the_cap_are_refused_not_cut(redis_server: Any) -> None:
    instructor = api(UserFactory())
    body = assignment_body([], instructions="[" * 262_000)
    response = instructor.post(f"/api/courses/{new_course(instructor)}/assignments", json.dumps(body),
                               content_type="application/json")  # fmt: skip
    error = json_error(response, 422)
    assert error["code"] == "markdown_too_large" and error["field"] == "instructions"


def test_reading_a_notebook_or_an_assignment_never_renders(redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendered once when saved and stored: the tester's instructions of 262,000 "[" were rendered
    again for every student's view (6-7 s each), and each notebook read rendered its cells."""
    instructor = api(UserFactory())
    course = new_course(instructor)
    body = assignment_body([], instructions="# Read me\n\n" + "[" * 60_000)
    assignment = post(instructor, f"/api/courses/{course}/assignments", body)
    notebook = create_notebook(instructor, [markdown_cell("m1", "*Notes* " + "![" * 30_000)])

    def no_rendering(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a read rendered markdown")

    class NoCleaning:  # every rendering path ends in the module's sanitiser
        clean = staticmethod(no_rendering)

    monkeypatch.setattr(bounded, "call", no_rendering)
    monkeypatch.setattr(markdown, "_CLEANER", NoCleaning())
    read = instructor.get(f"/api/assignments/{assignment['id']}").json()
    assert read["instructions_html"].startswith("<h1>Read me</h1>") and "[[[" in read["instructions_html"]
    cell = instructor.get(f"/api/notebooks/{notebook['id']}").json()["cells"][0]
    assert cell["html"].startswith("<p><em>Notes</em> ![![")
    listed = instructor.get("/api/notebooks")
    assert listed.status_code == 200


def test_a_save_renders_only_the_cells_whose_source_changed_small_ones_here_large_ones_in_a_child(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = api(UserFactory())
    notebook = create_notebook(client, [markdown_cell("m1", "# one"), markdown_cell("m2", "# two")])
    here: list[list[str]] = []
    children: list[Any] = []
    real_render_all, real_call = markdown.render_all, bounded.call

    def render_all(*, sources: list[str]) -> list[str]:
        here.append(sources)
        return real_render_all(sources=sources)

    def call(job: str, payload: Any, bounds: Any) -> Any:
        children.append(payload["sources"])
        return real_call(job, payload, bounds)

    monkeypatch.setattr(markdown, "render_all", render_all)
    monkeypatch.setattr(bounded, "call", call)
    same = save_notebook(client, notebook, [markdown_cell("m1", "# one"), markdown_cell("m2", "# two")])
    assert same.status_code == 200 and here == [] and children == []
    changed = save_notebook(client, same.json(), [markdown_cell("m1", "# one"), markdown_cell("m2", "# *2*")])
    assert here == [["# *2*"]] and children == []  # a few bytes: rendered here, in microseconds
    assert [c["html"] for c in changed.json()["cells"]] == ["<h1>one</h1>\n", "<h1><em>2</em></h1>\n"]
    large = "*long* " * 4000  # 28 kB: past RENDER_INLINE_BYTES
    saved = save_notebook(client, changed.json(), [markdown_cell("m1", "# one"), markdown_cell("m2", large)])
    assert children == [[large]] and saved.json()["cells"][1]["html"].startswith("<p><em>long</em> <em>long</em>")


def test_markdown_that_cannot_be_rendered_within_its_bounds_is_stored_as_escaped_text(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(markdown, "RENDER_BOUNDS", bounded.Bounds(cpu_s=1, wall_s=0.001))
    client = api(UserFactory())
    source = "<b>*bold*</b>" + " and more" * 2000  # past RENDER_INLINE_BYTES: rendered in a child
    cell = create_notebook(client, [markdown_cell("m1", source)])["cells"][0]
    assert "could not be rendered (it did not finish within 0.001 s)" in cell["html"]
    assert "<pre><code>&lt;b&gt;*bold*&lt;/b&gt; and more and more" in cell["html"]


def test_two_hundred_cells_of_unclosed_brackets_are_refused_or_saved_in_bounded_time(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tester's 200 cells of 19,000 "[" (3.8 MB) took 45.9 s to save, and every other request of
    the web process slowed to a crawl meanwhile: now a notebook's markdown is 1 MiB at most, refused
    before anything is rendered, and 200 cells within it are rendered in one bounded child."""
    client = api(UserFactory())
    notebook = create_notebook(client, [markdown_cell("m0", "# start")])
    renders: list[Any] = []
    real_call = bounded.call

    def call(job: str, payload: Any, bounds: Any) -> Any:
        renders.append(job)
        return real_call(job, payload, bounds)

    monkeypatch.setattr(bounded, "call", call)
    tester = [markdown_cell(f"m{i}", "[" * 19_000 + f" {i}") for i in range(200)]
    error = json_error(save_notebook(client, notebook, tester), 422)
    assert error["code"] == "markdown_too_large" and "at most 1 MiB together" in error["message"]
    assert renders == []
    cells = [markdown_cell(f"m{i}", "[" * 5_000 + f" {i}") for i in range(200)]
    started = time.monotonic()
    saved = save_notebook(client, notebook, cells)
    assert saved.status_code == 200, saved.content[:300]
    assert time.monotonic() - started < 15
    assert renders == [markdown.RENDER_JOB]
    assert [c["html"] for c in saved.json()["cells"]] == [f"<p>{'[' * 5_000} {i}</p>\n" for i in range(200)]


# --- notebooks in and out: read and written in bounded children -------------------------------


def test_an_ipynb_import_is_read_in_a_bounded_child_and_too_many_cells_refused_before_validation(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 MiB notebook of 40,000 cells took 2.8 s of the web process's CPU to validate; now it is
    read in a child of its own, which counts the cells before any schema work."""
    jobs: list[str] = []
    real_call = bounded.call

    def recorded(job: str, payload: Any, bounds: Any) -> Any:
        jobs.append(job)
        return real_call(job, payload, bounds)

    monkeypatch.setattr(bounded, "call", recorded)
    client = api(UserFactory())
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "x"}] * 40_000
    document = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
    upload = SimpleUploadedFile("big.ipynb", json.dumps(document).encode())
    error = json_error(client.post("/api/notebooks/import", {"file": upload}), 422)
    assert error["code"] == "too_many_cells" and "40000 cells" in error["message"]
    assert jobs == ["playground.ipynb:import_job"]
    small = {**document, "cells": [{"cell_type": "markdown", "metadata": {}, "source": "# fine"}]}
    created = client.post("/api/notebooks/import", {"file": SimpleUploadedFile("ok.ipynb", json.dumps(small).encode())})
    assert created.status_code == 201, created.content
    exported = client.get(f"/api/notebooks/{created.json()['id']}/ipynb")
    assert exported.status_code == 200 and json.loads(exported.content)["cells"][0]["source"] == "# fine"
    assert jobs == ["playground.ipynb:import_job"] * 2 + ["playground.ipynb:export_job"]  # "# fine" renders here


def test_a_roster_of_two_thousand_lines_is_imported_in_a_few_queries(django_assert_max_num_queries: Any) -> None:
    """It took three or four queries a line (about 6,000, each taking SQLite's write lock) in the
    request; now a few, and the inserts in batches."""
    from playground.classroom import courses as course_services
    from playground.models import CourseInvitation, Membership, Role

    teacher = cast(User, UserFactory())
    course = course_services.course_create(user=teacher, title="Big class")
    member = cast(User, UserFactory(username="already", email="Already@School.example"))
    Membership.objects.create(course=course, user=member, role=Role.STUDENT)
    CourseInvitation.objects.create(course=course, identifier="invited", created_by=teacher)
    lines = ["username,role", "ALREADY", "already@school.example", "invited", "bad name!,student", "x,teacher"]
    lines += [f"student{i},{'assistant' if i % 100 == 0 else 'student'}" for i in range(1994)]
    with django_assert_max_num_queries(30):  # SQLite inserts 2,000 rows in a dozen batches
        counts = course_services.roster_import(course=course, by=teacher, data="\n".join(lines).encode())
    assert counts == {"invited": 1994, "already_members": 2, "already_invited": 1,
                      "invalid": ["bad name!,student", "x,teacher"]}  # fmt: skip
    assert CourseInvitation.objects.filter(course=course, role=Role.ASSISTANT).count() == 20


def test_classroom_lists_read_no_code_instructions_or_test_texts(redis_server: Any) -> None:
    """A list of assignments, submissions or the gradebook loaded every submission's code (256 KiB
    each), every assignment's texts and every test's (up to 50 x 3 x 256 KiB) to show a few fields."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    instructor = api(UserFactory())
    tests = [{"name": "t", "stdin": "2\n", "expected_stdout": "4" * 1000, "points": 2}]
    course_id, code, assignment = course_with(instructor, tests, instructions="# long", starter_code="x = 1")
    _, student = joined(code)
    post(student, f"/api/assignments/{assignment}/submissions", {"code": "print(4)  # mine"})
    with CaptureQueriesContext(connection) as queries:
        listed = instructor.get(f"/api/courses/{course_id}/assignments").json()
        book = instructor.get(f"/api/courses/{course_id}/gradebook").json()
        mine = student.get(f"/api/courses/{course_id}/assignments").json()
        subs = instructor.get(f"/api/assignments/{assignment}/submissions").json()
    assert listed[0]["max_score"] == 2 and book["assignments"][0]["max_score"] == 2
    assert mine[0]["my"]["attempts_used"] == 1 and len(subs) == 1
    # One row's texts (the assignment asked for: LIMIT 1 or a get's 21) are fine; a list's are not.
    lists = [q["sql"] for q in queries.captured_queries if not re.search(r"LIMIT (1|21)$", q["sql"])]
    for column in ('"playground_submission"."code"', '"expected_stdout"', '"starter_code"', '"instructions"'):
        assert not [sql for sql in lists if column in sql], column


# --- the web process: a large body's handling yields to the others ------------------------------


def test_a_request_with_a_large_body_is_handled_at_a_lower_cpu_priority_than_the_others() -> None:
    import threading

    from django.http import HttpResponse
    from django.test import RequestFactory

    from playground.fairness import LARGE_BODY_BYTES, LargeBodiesYield

    def nice_now() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    seen: list[int] = []

    def view(request: Any) -> HttpResponse:
        seen.append(nice_now())
        return HttpResponse("ok")

    before = nice_now()
    middleware = LargeBodiesYield(view)
    factory = RequestFactory()
    middleware(factory.put("/api/notebooks/x", b"{}" * 10, content_type="application/json"))
    middleware(factory.put("/api/notebooks/x", b" " * LARGE_BODY_BYTES, content_type="application/json"))
    assert seen == [before, max(before, 10)]
    assert nice_now() == before  # and back for whatever this thread does next
