"""What an operator plugs in: /metrics scraped and parsed with prometheus_client's own parser after
real runs on a real worker; its refusals; one JSON log line per event; retention per kind, audited."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from playground import logs
from playground.logformat import JsonFormatter
from playground.models import Dataset, Purge, Run, RunCell, RunState, StaffAccess
from playground.services import retention
from playground.services.accounts import token_create
from playground.services.audit import record_staff_access
from playground.services.execution import run_claim, run_finish
from playground.services.runs import record_event
from runner.spec import CleanupCheck, Limits, Outcome, RunnerError, RunResult
from tests.playground.conftest import api
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import submit, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def _scraper(**user_fields: Any) -> Client:
    """A client with the bearer token of a staff account allowed to read the metrics."""
    user: Any = UserFactory(is_staff=True, **user_fields)
    user.user_permissions.add(Permission.objects.get(codename="view_metrics"))
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=user)}")


def _samples(client: Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain; version=")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.mark.images
@pytest.mark.usefixtures("worker")
def test_a_scrape_shows_the_runs_a_test_made_by_outcome_engine_and_kind() -> None:
    scraper = _scraper()
    before = _samples(scraper)
    client = api(UserFactory())
    made = [submit(client, "print('ok')"), submit(client, "print('ok')"), submit(client, "raise SystemExit(3)")]
    outcomes = [wait_finished(client, run["id"])["outcome"] for run in made]
    assert outcomes == ["succeeded", "succeeded", "failed"]
    finished = "cordon_runs_finished_total"
    deadline = time.monotonic() + 10  # counted as each run's end is committed, in the worker's process
    while True:
        after = _samples(scraper)
        grew = {
            outcome: _value(after, finished, outcome=outcome, engine="namespace", kind="run")
            - _value(before, finished, outcome=outcome, engine="namespace", kind="run")
            for outcome in ("succeeded", "failed")
        }
        if grew == {"succeeded": 2, "failed": 1} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert grew == {"succeeded": 2, "failed": 1}
    waits = "cordon_run_queue_wait_seconds_count"
    walls = "cordon_run_wall_seconds_count"
    assert _value(after, waits, engine="namespace") - _value(before, waits, engine="namespace") == 3
    assert _value(after, walls, engine="namespace") - _value(before, walls, engine="namespace") == 3
    # The database's states, read at scrape time: no run in a sandbox now, nothing queued for grading.
    assert _value(after, "cordon_grading_queue_depth", state="waiting") == 0
    assert not [k for k, v in after.items() if k[0] == "cordon_live_sandboxes" and v]


def test_a_run_ended_by_our_fault_counts_its_error_code_and_failed_cleanup_checks() -> None:
    scraper = _scraper()
    before = _samples(scraper)
    owner: Any = UserFactory()
    run = Run.objects.create(owner=owner, runtime="python", code="1", limits=Limits().to_json())
    claimed = run_claim(run_id=str(run.id), worker="w")
    assert claimed is not None
    result = RunResult(
        outcome=Outcome.SANDBOX_ERROR, run_id=str(run.id), reason="the sandbox did not start", engine="namespace",
        error=RunnerError("setup_failed", "no"), cleanup=[CleanupCheck("processes", False, "1 left")],
    )  # fmt: skip
    run_finish(run=claimed, result=result, exported=None, samples=[])
    after = _samples(scraper)
    errors = "cordon_sandbox_errors_total"
    assert _value(after, errors, code="setup_failed") - _value(before, errors, code="setup_failed") == 1
    failures = "cordon_cleanup_check_failures_total"
    assert _value(after, failures, check="processes") - _value(before, failures, check="processes") == 1


def test_the_metrics_are_refused_to_anyone_but_a_staff_token_with_the_permission() -> None:
    assert Client().get("/metrics").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer not-a-token").get("/metrics").status_code == 401
    staff: Any = UserFactory(is_staff=True)  # staff, without the permission
    assert Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=staff)}").get("/metrics").status_code == 403
    allowed: Any = UserFactory()  # the permission, not staff
    allowed.user_permissions.add(Permission.objects.get(codename="view_metrics"))
    assert Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=allowed)}").get("/metrics").status_code == 403
    session = Client()
    admin: Any = UserFactory(is_staff=True, is_superuser=True)
    session.force_login(admin)  # a session is not a token
    assert session.get("/metrics").status_code == 401
    assert _scraper(is_superuser=True).post("/metrics").status_code == 405


@override_settings(CORDON_SUBMISSIONS_PER_MINUTE_STUDENT=1)
def test_a_throttle_refusal_is_counted_by_throttle() -> None:
    from playground import throttle

    scraper = _scraper()
    before = _value(_samples(scraper), "cordon_throttle_refusals_total", throttle="submit")
    assert throttle.rate_wait_s("submit:x:1", 1) is None
    assert throttle.rate_wait_s("submit:x:1", 1) is not None
    assert _value(_samples(scraper), "cordon_throttle_refusals_total", throttle="submit") == before + 1


# --- structured logs -------------------------------------------------------------------------------


@pytest.fixture
def events() -> Iterator[Callable[[], dict[str, list[dict[str, Any]]]]]:
    """The lines the event logger has written in this process so far, in the JSON format, parsed
    and grouped by event."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("cordon.events")
    logger.addHandler(handler)
    try:
        yield lambda: _by_event([json.loads(line) for line in stream.getvalue().splitlines()])
    finally:
        logger.removeHandler(handler)


def _by_event(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        found.setdefault(line["event"], []).append(line)
    return found


def test_each_event_of_a_run_is_one_json_line_with_run_user_host_and_engine(events: Any) -> None:
    user: Any = UserFactory(username="ana")
    run = Run.objects.create(owner=user, runtime="python", code="print(1)", limits=Limits().to_json())
    record_event(run=run, state=RunState.QUEUED, detail={"queue": "namespace"})
    claimed = run_claim(run_id=str(run.id), worker="host-a")
    assert claimed is not None
    refused = {"host": "evil.example", "port": 443, "allowed": False, "reason": "not in the run's egress policy"}
    result = RunResult(
        outcome=Outcome.SUCCEEDED, run_id=str(run.id), reason="exited 0", engine="namespace", exit_code=0,
        egress={"attempts": [refused], "refused": 1, "connections": 0},
        cleanup=[CleanupCheck("processes", True, ""), CleanupCheck("mounts", False, "1 left")],
    )  # fmt: skip
    run_finish(run=claimed, result=result, exported=None, samples=[])
    record_staff_access(viewer=UserFactory(username="sam", is_staff=True), owner=user, what="run page", run=run)
    by_event = events()
    for name in ("run_created", "run_claimed", "run_finished", "cleanup_failed", "egress_refused"):
        [line] = by_event[name]
        assert line["run"] == str(run.id) and line["user"] == "ana" and line["kind"] == "run", line
        assert line["host"] and line["engine"] in ("namespace", "auto"), line
        assert "print(1)" not in json.dumps(line)  # metadata, never the code
        assert set(line) >= {"time", "level", "logger", "message"}
    assert by_event["run_created"][0]["queue"] == "namespace" and by_event["run_claimed"][0]["worker"] == "host-a"
    assert (
        by_event["run_finished"][0]["outcome"] == "succeeded" and by_event["run_finished"][0]["engine"] == "namespace"
    )
    assert by_event["cleanup_failed"][0]["check"] == "mounts" and by_event["cleanup_failed"][0]["level"] == "error"
    assert by_event["egress_refused"][0]["destination"] == "evil.example:443"
    [access] = by_event["staff_access"]
    assert access["user"] == "sam" and access["owner"] == "ana" and access["what"] == "run page"


def test_log_ins_failed_log_ins_and_token_uses_are_events(events: Any) -> None:
    UserFactory(username="lee")
    assert Client().post("/accounts/login/", {"username": "lee", "password": "wrong"}).status_code == 200
    right = {"username": "lee", "password": "correct horse battery staple"}
    assert Client().post("/accounts/login/", right).status_code == 302
    client = api(UserFactory(username="tok"))
    assert client.get("/api/runs").status_code == 200
    assert client.get("/api/runs").status_code == 200  # its use is written once a minute: one event
    by_event = events()
    assert [line["tried"] for line in by_event["login_failed"]] == ["lee"]
    assert [line["user"] for line in by_event["login"]] == ["lee"] and by_event["login"][0]["address"] == "127.0.0.1"
    assert [line["user"] for line in by_event["token_used"]] == ["tok"]
    assert "wrong" not in json.dumps(by_event)  # a password is never logged


def test_the_plain_format_shows_an_events_fields_as_words() -> None:
    record = logging.LogRecord("cordon.events", logging.INFO, __file__, 1, "x", (), None)
    from playground.observe import event

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    events = logging.getLogger("cordon.events")
    events.addHandler(handler)
    try:
        event("run_finished", run="r1", outcome="failed", note=None)
    finally:
        events.removeHandler(handler)
    assert stream.getvalue() == "run_finished run=r1 outcome=failed\n"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "x" and line["level"] == "info" and "event" not in line


# --- retention -------------------------------------------------------------------------------------


def _finished(user: Any, days_ago: int) -> Run:
    return Run.objects.create(owner=user, runtime="python", code="secret()", state=RunState.FINISHED,
                              outcome="succeeded", finished_at=timezone.now() - timedelta(days=days_ago))  # fmt: skip


@override_settings(CORDON_RETENTION={"logs": 7, "outputs": 30, "snapshots": 3, "datasets": 90, "audit": 365})
def test_each_kind_is_kept_its_own_days_and_the_purge_is_recorded(redis_server: Any) -> None:
    user: Any = UserFactory()
    run = _finished(user, days_ago=10)  # past logs' 7 and snapshots' 3, within outputs' 30
    logs.log_append(run_id=run.id, stream="stdout", offset=0, data=b"user data")
    logs.log_store(run_id=run.id)
    logs.log_release(run_id=run.id)
    state = default_storage.save("states/kept-days", ContentFile(b"pickled"))
    image = default_storage.save("displays/kept-days", ContentFile(b"\x89PNG"))
    picture = {"mime": "image/png", "path": image, "size": 4, "sha256": "0" * 64, "plain": "<F>"}
    RunCell.objects.create(run=run, state_file=state, state_bytes=7, state_sha256="0" * 64, displays=[picture])
    from django.core.files.uploadedfile import SimpleUploadedFile

    from playground.services import datasets as dataset_services

    dataset = dataset_services.dataset_create(user=user, upload=SimpleUploadedFile("a.csv", b"x"))
    Dataset.objects.filter(id=dataset.id).update(created_at=timezone.now() - timedelta(days=40))  # within 90
    old_access = record_staff_access(viewer=UserFactory(is_staff=True), owner=user, what="run page", run=run)
    assert old_access is not None
    StaffAccess.objects.filter(id=old_access.id).update(at=timezone.now() - timedelta(days=400))  # past 365

    counts = retention.purge_expired()
    assert counts == {"datasets": 0, "logs": 1, "outputs": 0, "snapshots": 1, "audit": 1}
    cell = RunCell.objects.get(run=run)
    assert not cell.state_file and not default_storage.exists(state)
    assert default_storage.exists(image) and cell.displays[0]["mime"] == "image/png"  # outputs: 30 days
    assert Dataset.objects.filter(id=dataset.id).exists()
    assert not StaffAccess.objects.filter(id=old_access.id).exists()
    [purge] = Purge.objects.filter(kind="expired")
    assert purge.counts == counts and set(purge.older_than) == {"logs", "outputs", "snapshots", "datasets", "audit"}
    assert retention.purge_expired() == {"datasets": 0, "logs": 0, "outputs": 0, "snapshots": 0, "audit": 0}
    assert Purge.objects.count() == 1  # a purge that deleted nothing is not recorded


def test_a_purge_on_request_records_who_asked(redis_server: Any) -> None:
    owner: Any = UserFactory(username="owner1")
    staff: Any = UserFactory(username="admin1", is_staff=True)
    _finished(owner, days_ago=1)
    counts = retention.purge_user_data(user=owner, by=staff)
    [purge] = Purge.objects.all()
    assert purge.kind == "user" and purge.owner_username == "owner1" and purge.by == staff and purge.counts == counts


def test_metrics_reset_removes_the_files_of_earlier_processes(settings: Any, tmp_path: Any) -> None:
    settings.CORDON_METRICS_DIR = tmp_path
    (tmp_path / "counter_123.db").write_bytes(b"x")
    (tmp_path / "keep.txt").write_text("not a metrics file")
    out = io.StringIO()
    call_command("metrics_reset", stdout=out)
    assert not (tmp_path / "counter_123.db").exists() and (tmp_path / "keep.txt").exists()
    assert "1 file(s)" in out.getvalue()


def test_the_warm_bases_an_engine_keeps_are_gauged_by_image_and_state(tmp_path: Any) -> None:
    import os

    import psutil

    from playground.metrics import _kept
    from runner.config import SupervisorSettings
    from runner.engines.smolvm.bases import BaseKey, BaseRecord
    from runner.registry import Registry, build

    settings = SupervisorSettings.from_env()
    engine: Any = build("smolvm", settings, environ={**os.environ, "CORDON_SMOLVM_STATE_DIR": str(tmp_path / "vms")})
    key = BaseKey(image="python", image_digest="sha256:0", runtime="r", cpus=1, memory_mib=512, storage_gb=1,
                  overlay_gb=1, uid_drop="")  # fmt: skip
    me = psutil.Process()
    for name, state, pid, started in (("cordonbase-a", "frozen", me.pid, me.create_time()),
                                      ("cordonbase-b", "building", me.pid, me.create_time()),
                                      ("cordonbase-c", "frozen", me.pid, 1.0)):  # fmt: skip  # c: its keeper is gone
        engine.bases.folder(name).mkdir(parents=True)
        engine.bases.write(BaseRecord(name=name, key=key, state=state, created_at=0.0, keeper_pid=pid,
                                      keeper_started=started))  # fmt: skip
    kept = Registry(settings, tmp_path / "state", engines={"smolvm": engine}).kept()
    [family] = _kept(kept, "h1")
    found = {(s.labels["image"], s.labels["state"]): s.value for s in family.samples}
    assert found == {("python", "frozen"): 1, ("python", "building"): 1, ("python", "dead"): 1}
    assert {s.labels["engine"] for s in family.samples} == {"smolvm"}


def test_a_worker_host_serves_its_own_metrics_on_its_bind_address_without_the_shared_gauges() -> None:
    import urllib.request

    from playground import metrics

    metrics.count_throttled("bind-test")
    address = metrics.serve("127.0.0.1:0")
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        families = {f.name: f for f in text_string_to_metric_families(answer.read().decode())}
    [sample] = [s for s in families["cordon_throttle_refusals"].samples if s.labels.get("throttle") == "bind-test"]
    assert sample.value >= 1
    assert "cordon_ready_sandboxes" in families and "cordon_warm_bases" in families
    assert "cordon_live_sandboxes" not in families  # the web hosts serve the database's gauges, once
