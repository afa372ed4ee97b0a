"""Scoped egress on the web's side: a run's policy checked against the site's ceiling (read once from
CORDON_EGRESS_CEILING) and its course's, when it is asked for and again when a worker takes it;
the record of what it reached stored on the run, and shown on its page, the audit console and the
CSV export; and one run end to end whose proxy refuses, unresolved, a name outside its policy."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from playground.classroom import grading_queue, grading_results
from playground.models import Run, RunEvent, RunState, Submission, TestResult
from playground.services import execution
from playground.services import runs as run_services
from runner.egress.policy import Policy
from runner.spec import Outcome, RunResult
from tests.conftest import PYTHON, child_env
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory

SITE = Policy.parse(["api.example.org:443", "*.example.net:443", "nowhere.invalid:80"])
NOWHERE_REFUSED = {
    "at": 1767225600.25, "method": "GET", "host": "nowhere.invalid", "port": 80, "allowed": False,
    "reason": "the name does not resolve ([Errno -2] Name or service not known)", "address": "", "bytes_out": 0,
    "bytes_in": 0, "seconds": 0.0,
}  # fmt: skip
API_ALLOWED = {
    "at": 1767225601.5, "method": "CONNECT", "host": "api.example.org", "port": 443, "allowed": True,
    "reason": "cut: the run's egress cap (more than 256 KiB in)", "address": "93.184.215.14",
    "bytes_out": 517, "bytes_in": 262_656, "seconds": 0.42,
}  # fmt: skip
RECORD = {
    "policy": ["api.example.org:443", "nowhere.invalid:80"], "attempts": [NOWHERE_REFUSED, API_ALLOWED],
    "connections": 1, "refused": 1, "bytes_out": 517, "bytes_in": 262_656, "limit": "more than 256 KiB in",
}  # fmt: skip


def post(client: Client, path: str, body: Any, method: str = "POST") -> Any:
    return client.generic(method, path, json.dumps(body), "application/json")


def submit(client: Client, egress: Any = None, code: str = "print(1)") -> Any:
    body: dict[str, Any] = {"runtime": "python", "code": code}
    if egress is not None:
        body["egress"] = egress
    return post(client, "/api/runs", body)


# --- the site's ceiling, from the environment -----------------------------------------------


def _settings_process(project_root: Path, expression: str, **env: str) -> subprocess.CompletedProcess[str]:
    code = f"import django; django.setup(); from django.conf import settings as s; print({expression})"
    return subprocess.run(
        [PYTHON, "-c", code], cwd=project_root, env=child_env(DJANGO_SETTINGS_MODULE="playground.settings", **env),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_site_ceiling_is_read_from_the_environment_and_empty_allows_nothing(project_root: Path) -> None:
    ceiling = "api.example.org:443, *.PyPI.org:443\tfiles.example.net:443"
    read = _settings_process(project_root, "s.CORDON_EGRESS_CEILING.to_json()", CORDON_EGRESS_CEILING=ceiling)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "['api.example.org:443', '*.pypi.org:443', 'files.example.net:443']"
    unset = _settings_process(project_root, "s.CORDON_EGRESS_CEILING.to_json()", CORDON_EGRESS_CEILING="")
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "[]"


def test_a_ceiling_naming_an_address_stops_start_up_naming_the_variable(project_root: Path) -> None:
    result = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=project_root, env=child_env(CORDON_EGRESS_CEILING="10.0.0.1:80"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Cordon configuration error: CORDON_EGRESS_CEILING:" in result.stderr
    assert "never addresses" in result.stderr


# --- a run's policy through the API -----------------------------------------------------------


@pytest.fixture
def site(settings: Any) -> Policy:
    settings.CORDON_EGRESS_CEILING = SITE
    return SITE


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("egress", "code", "words"),
    [
        (["nohost:443"], "egress_invalid", "is not a host name"),
        (["api.example.org"], "egress_invalid", "host:port with a port from 1 to 65535"),
        (["api.example.org:0"], "egress_invalid", "a port from 1 to 65535"),
        (["10.0.0.1:80"], "egress_invalid", "names, never addresses"),
        (["169.254.169.254:80"], "egress_invalid", "names, never addresses"),
        (["[::1]:80"], "egress_invalid", "is not a host name"),
        ([7], "egress_invalid", "a list of destinations"),
        ("api.example.org:443", "egress_invalid", "a list of destinations"),
        (["a.example.net:443"] * 33, "egress_invalid", "at most 32 destinations"),
        (["other.org:443"], "egress_outside_ceiling", "egress to other.org:443 is outside this service's ceiling"),
        (["api.example.org:80"], "egress_outside_ceiling", "outside this service's ceiling"),
        (["*.example.org:443"], "egress_outside_ceiling", "outside this service's ceiling"),
        (["example.net:443"], "egress_outside_ceiling", "outside this service's ceiling"),  # *. is below, not it
    ],
)
def test_a_policy_that_is_not_one_or_passes_the_site_ceiling_is_a_422_with_its_code(
    site: Policy, egress: Any, code: str, words: str
) -> None:
    error = json_error(submit(api(UserFactory()), egress), 422)
    assert error["code"] == code, error
    assert words in error["message"], error
    assert (error["field"] or "").startswith("egress")
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_with_no_ceiling_set_any_policy_is_refused_and_the_refusal_says_nothing_is_allowed() -> None:
    error = json_error(submit(api(UserFactory()), ["api.example.org:443"]), 422)
    assert error["code"] == "egress_outside_ceiling"
    assert "(it allows nothing)" in error["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_run_within_the_ceiling_keeps_its_policy_as_the_supervisor_reads_it(site: Policy, redis_server: Any) -> None:
    client = api(UserFactory())
    created = submit(client, ["API.example.org:443", "deep.a.example.net:443", "api.example.org:443"])
    assert created.status_code == 201, created.content
    assert created.json()["egress"] == ["api.example.org:443", "deep.a.example.net:443"]
    detail = client.get(f"/api/runs/{created.json()['id']}").json()
    assert detail["egress"] == ["api.example.org:443", "deep.a.example.net:443"] and detail["egress_record"] is None
    run = Run.objects.get(id=created.json()["id"])
    assert execution.run_spec(run=run, staging=Path("/nonexistent")).egress == (
        "api.example.org:443",
        "deep.a.example.net:443",
    )
    plain = submit(client)
    assert plain.status_code == 201 and plain.json()["egress"] == []
    assert execution.run_spec(run=Run.objects.get(id=plain.json()["id"]), staging=Path("/nonexistent")).egress == ()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_rerun_and_a_retry_keep_the_policy_and_are_checked_against_todays_ceiling(
    site: Policy, redis_server: Any
) -> None:
    user = UserFactory()
    first = submit(api(user), ["api.example.org:443"]).json()
    rerun = api(user).post(f"/api/runs/{first['id']}/rerun")
    assert rerun.status_code == 201 and rerun.json()["egress"] == ["api.example.org:443"]
    lowered = Policy.parse(["*.example.net:443"])
    with override_settings(CORDON_EGRESS_CEILING=lowered):
        error = json_error(api(user).post(f"/api/runs/{first['id']}/rerun"), 422)
        assert error["code"] == "egress_outside_ceiling" and error["field"] == "egress"
        run = Run.objects.get(id=first["id"])
        Run.objects.filter(id=run.id).update(state="finished", outcome=Outcome.SANDBOX_ERROR.value)
        assert run_services.retry_once(run=run) is None
    assert "outside this service's ceiling" in RunEvent.objects.get(run=run, state="retry_refused").detail["reason"]
    retry = run_services.retry_once(run=run)
    assert retry is not None and retry.egress == ["api.example.org:443"]


@pytest.mark.django_db
def test_the_openapi_document_types_the_policy_and_its_record(site: Policy) -> None:
    schemas = Client().get("/api/openapi.json").json()["components"]["schemas"]
    egress = schemas["RunIn"]["properties"]["egress"]
    assert egress["type"] == "array" and egress["maxItems"] == 32 and egress["items"]["maxLength"] == 260
    assert egress["default"] == []
    record = schemas["RunDetailOut"]["properties"]["egress_record"]
    assert {"$ref": "#/components/schemas/EgressRecordOut"} in record["anyOf"]
    attempt = schemas["EgressAttemptOut"]["properties"]
    assert set(attempt) == set(NOWHERE_REFUSED)
    assert api(UserFactory()).get("/api/egress").json() == {"ceiling": SITE.to_json()}


# --- a course's ceiling ------------------------------------------------------------------------


def _course(client: Client, **policy: Any) -> Any:
    return post(client, "/api/courses", {"title": "Data 101", **policy})


def _assignment(client: Client, course_id: str, egress: list[str]) -> Any:
    body = {"title": "Fetch it", "runtime": "python", "egress": egress,
            "tests": [{"name": "one", "stdin": "1", "expected_stdout": "1"}], "publish": True}  # fmt: skip
    return post(client, f"/api/courses/{course_id}/assignments", body)


def _enrolled(instructor: Client) -> tuple[Any, Any, Any]:
    """A course allowing api.example.org:443, an assignment naming it, and a student who joined."""
    course = _course(instructor, egress_ceiling=["api.example.org:443"]).json()
    assignment = _assignment(instructor, course["id"], ["api.example.org:443"]).json()
    student: Any = UserFactory()
    post(api(student), "/api/courses/join", {"join_code": course["join_code"]})
    return course, assignment, student


@pytest.mark.django_db
def test_a_course_ceiling_must_be_within_the_sites_and_an_assignment_within_the_courses(site: Policy) -> None:
    instructor = api(UserFactory())
    wider = json_error(_course(instructor, egress_ceiling=["files.other.org:443"]), 422)
    assert (wider["code"], wider["field"]) == ("egress_outside_ceiling", "egress_ceiling")
    assert "outside this service's ceiling" in wider["message"]
    course = _course(instructor, egress_ceiling=["api.example.org:443", "data.example.net:443"])
    assert course.status_code == 201, course.content
    course_id = course.json()["id"]
    assert course.json()["egress_ceiling"] == ["api.example.org:443", "data.example.net:443"]
    invalid = json_error(post(instructor, f"/api/courses/{course_id}", {"egress_ceiling": ["nohost"]}, "PATCH"), 422)
    assert (invalid["code"], invalid["field"]) == ("egress_invalid", "egress_ceiling")
    # Within the site's ceiling (*.example.net:443) but not the course's: refused, naming the course's.
    outside = json_error(_assignment(instructor, course_id, ["other.example.net:443"]), 422)
    assert (outside["code"], outside["field"]) == ("egress_outside_ceiling", "egress")
    assert outside["message"] == (
        "egress to other.example.net:443 is outside this course's ceiling "
        "(it allows api.example.org:443, data.example.net:443)"
    )
    created = _assignment(instructor, course_id, ["data.example.net:443"])
    assert created.status_code == 201, created.content
    assert created.json()["egress"] == ["data.example.net:443"]
    closed = _course(instructor).json()  # a course's ceiling is empty unless set: no network
    assert closed["egress_ceiling"] == []
    nothing = json_error(_assignment(instructor, closed["id"], ["api.example.org:443"]), 422)
    assert nothing["message"].endswith("outside this course's ceiling (it allows nothing)")


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.usefixtures("no_worker")
def test_a_course_run_is_checked_again_when_the_course_ceiling_is_lowered(site: Policy, redis_server: Any) -> None:
    instructor = api(UserFactory())
    course, assignment, student = _enrolled(instructor)
    tried = post(api(student), f"/api/assignments/{assignment['id']}/try", {"code": "print(1)"})
    assert tried.status_code == 201, tried.content
    assert tried.json()["egress"] == ["api.example.org:443"]

    lowered = post(instructor, f"/api/courses/{course['id']}", {"egress_ceiling": []}, "PATCH")
    assert lowered.status_code == 200 and lowered.json()["egress_ceiling"] == []
    refused = json_error(post(api(student), f"/api/assignments/{assignment['id']}/try", {"code": "print(1)"}), 422)
    assert refused["code"] == "egress_outside_ceiling" and "this course's ceiling" in refused["message"]

    # The run made before the change is refused when a worker takes it: nothing is staged or started.
    final = execution.run_execute(run_id=tried.json()["id"], worker="test-host")
    assert final is not None and final.state == RunState.FINISHED
    assert final.outcome == Outcome.REJECTED_INPUT.value and final.charged is False
    assert final.error_code == "egress_outside_ceiling" and "this course's ceiling" in final.reason
    assert final.egress_record is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.usefixtures("no_worker")
def test_a_test_run_has_the_assignments_policy_and_a_lowered_ceiling_is_not_the_students_fault(
    site: Policy, redis_server: Any
) -> None:
    instructor = api(UserFactory())
    course, assignment, student = _enrolled(instructor)
    first = post(api(student), f"/api/assignments/{assignment['id']}/submissions", {"code": "print(1)"})
    assert first.status_code == 201, first.content
    grading_queue.pump()
    [result] = TestResult.objects.filter(submission_id=first.json()["id"])
    assert result.run is not None and result.run.egress == ["api.example.org:443"]

    post(instructor, f"/api/courses/{course['id']}", {"egress_ceiling": []}, "PATCH")
    second = post(api(student), f"/api/assignments/{assignment['id']}/submissions", {"code": "print(2)"})
    grading_queue.pump()
    [result] = TestResult.objects.filter(submission_id=second.json()["id"])
    assert result.run is None and result.status == "not_graded"
    assert "outside this course's ceiling" in result.detail
    submission = Submission.objects.get(id=second.json()["id"])
    assert submission.state == "not_graded" and submission.charged is False  # not an attempt used


def test_an_egress_limit_reads_as_a_failure_in_plain_words() -> None:
    assert grading_results.result_words(Outcome.EGRESS_LIMIT.value).startswith("failed: the program sent, received")


# --- the record, stored and shown ---------------------------------------------------------------


def _finished_with_record(owner: Any, record: dict[str, Any] | None, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "runtime": "python", "code": "import urllib.request", "state": "finished", "outcome": "egress_limit",
        "engine": "namespace", "isolation": "namespace", "egress": ["api.example.org:443", "nowhere.invalid:80"],
        "egress_record": record, "cleanup_ok": True,
    }  # fmt: skip
    values.update(fields)
    return Run.objects.create(owner=owner, **values)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_the_worker_stores_the_proxys_record_and_keeps_a_bounded_list_of_attempts(redis_server: Any) -> None:
    owner: Any = UserFactory()
    run = Run.objects.create(owner=owner, runtime="python", code="", state="running", egress=RECORD["policy"])
    many = {**RECORD, "attempts": [NOWHERE_REFUSED] * 1002, "refused": 1002, "connections": 0, "limit": ""}
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id=run.id.hex[:16], egress=many)
    execution.run_finish(run=run, result=result, exported=None, samples=[])
    run.refresh_from_db()
    assert run.egress_record is not None
    assert len(run.egress_record["attempts"]) == 1000 and run.egress_record["attempts_not_kept"] == 2
    assert run.egress_record["refused"] == 1002  # the totals are the proxy's own, over every attempt
    shown = api(owner).get(f"/api/runs/{run.id}").json()["egress_record"]
    assert shown["attempts"][0] == NOWHERE_REFUSED and shown["attempts_not_kept"] == 2


@pytest.mark.django_db
def test_the_run_page_lists_each_attempt_its_policy_totals_and_the_cap_passed() -> None:
    owner: Any = UserFactory()
    run = _finished_with_record(owner, RECORD)
    client = Client()
    client.force_login(owner)
    html = client.get(f"/runs/{run.id}/").content.decode()
    assert "<code>api.example.org:443</code>, <code>nowhere.invalid:80</code>" in html
    assert "1 connected · 1 refused" in html and "517 bytes out · 256.5 KiB in" in html
    assert "stopped: the run passed its egress cap (more than 256 KiB in)" in html
    assert "2026-01-01 00:00:00" in html and "<code>nowhere.invalid:80</code>" in html
    assert "the name does not resolve ([Errno -2] Name or service not known)" in html
    assert '<tr class="egress-refused">' in html and '<tr class="egress-allowed">' in html
    assert "<code>93.184.215.14</code>" in html and "cut: the run&#x27;s egress cap" in html

    plain = Run.objects.create(owner=owner, runtime="python", code="", state="finished", outcome="succeeded")
    assert "No network: this run had no egress policy." in client.get(f"/runs/{plain.id}/").content.decode()
    live = Run.objects.create(owner=owner, runtime="python", code="", state="running", egress=["api.example.org:443"])
    page = client.get(f"/runs/{live.id}/").content.decode()
    assert 'data-pending="true"' in page and 'id="egress-pending"' in page


@pytest.mark.django_db
def test_the_audit_console_shows_the_attempts_filters_by_network_and_exports_the_counts() -> None:
    owner: Any = UserFactory()
    staff: Any = UserFactory(is_staff=True, is_superuser=True)
    run = _finished_with_record(owner, RECORD)
    quiet = Run.objects.create(owner=owner, runtime="python", code="", state="finished", outcome="succeeded")
    client = Client()
    client.force_login(staff)
    html = client.get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert 'id="audit-egress"' in html and "api.example.org:443, nowhere.invalid:80" in html
    assert "1 connected, 1 refused, 517 bytes out, 256.5 KiB in" in html
    assert "2026-01-01 00:00:00.250" in html and "2026-01-01 00:00:01.500" in html  # to the millisecond
    assert "the name does not resolve" in html and "93.184.215.14" in html
    assert (
        "No network: this run had no egress policy."
        in client.get(f"/admin/playground/run/{quiet.id}/change/").content.decode()
    )

    listed = client.get("/admin/playground/run/?network=refused").content.decode()
    assert str(run.id) in listed and str(quiet.id) not in listed
    listed = client.get("/admin/playground/run/?network=none").content.decode()
    assert str(quiet.id) in listed and str(run.id) not in listed
    for choice in ("egress", "capped"):
        listed = client.get(f"/admin/playground/run/?network={choice}").content.decode()
        assert str(run.id) in listed and str(quiet.id) not in listed

    response = client.get("/admin/playground/run/export.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    header = rows[0]
    row = next(r for r in rows[1:] if r[0] == str(run.id))
    egress = {name: row[header.index(name)] for name in header if name.startswith("egress")}
    assert egress == {
        "egress": "api.example.org:443 nowhere.invalid:80", "egress_connections": "1", "egress_refused": "1",
        "egress_bytes_out": "517", "egress_bytes_in": "262656", "egress_limit": "more than 256 KiB in",
    }  # fmt: skip
    row = next(r for r in rows[1:] if r[0] == str(quiet.id))
    assert [row[header.index(name)] for name in egress] == [""] * 6  # no record: unknown, not 0


# --- end to end ------------------------------------------------------------------------------------

FETCH_NOWHERE = """\
import urllib.error, urllib.request
try:
    urllib.request.urlopen("http://nowhere.invalid/", timeout=20)
except urllib.error.HTTPError as exc:
    print("refused", exc.code, exc.headers.get("X-Cordon-Egress"))
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.images
def test_a_run_with_a_policy_reaches_its_proxy_and_the_refusal_is_recorded(
    worker_env: dict[str, str], site: Policy
) -> None:
    from tests.playground.conftest import Worker

    # The request names a host outside the run's policy: the proxy refuses it before any lookup, so
    # the test sends nothing to any resolver (tests reach only loopback or hosts of their own).
    worker = Worker({**worker_env, "CORDON_EGRESS_CEILING": "api.example.org:443"})
    worker.start()
    try:
        client = api(UserFactory())
        created = submit(client, ["api.example.org:443"], code=FETCH_NOWHERE)
        assert created.status_code == 201, created.content
        deadline = time.monotonic() + 90
        while (run := client.get(f"/api/runs/{created.json()['id']}").json())["state"] != "finished":
            assert time.monotonic() < deadline, run
            time.sleep(0.2)
    finally:
        worker.stop()
    assert run["outcome"] == "succeeded", run
    log = client.get(f"/api/runs/{run['id']}/log").json()["data"]
    assert log == "refused 403 refused\n"
    record = run["egress_record"]
    assert record["policy"] == ["api.example.org:443"]
    assert (record["connections"], record["refused"], record["bytes_out"], record["bytes_in"]) == (0, 1, 0, 0)
    [attempt] = record["attempts"]
    assert (attempt["method"], attempt["host"], attempt["port"], attempt["allowed"]) == (
        "GET",
        "nowhere.invalid",
        80,
        False,
    )
    assert attempt["reason"] == "not in the run's egress policy" and attempt["address"] == ""


def test_network_figures_on_the_pages_are_in_units_not_raw_bytes() -> None:
    from django.template import Context, Template

    said = Template("{{ n|size }} · {{ s|seconds }} · {{ none|size }}").render(Context({"n": 262_656, "s": 0.25}))
    assert said == "256.5 KiB · 250 ms · -"
