"""Submit through the API, run on a real Celery worker and the namespace engine, read it back."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from playground.models import Run
from runner.images import read_lock
from tests.playground.conftest import api
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]


def submit(client: Client, code: str, runtime: str = "python", **extra: Any) -> dict[str, Any]:
    response = client.post("/api/runs", json.dumps({"runtime": runtime, "code": code, **extra}),
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 201, response.content
    return response.json()


def wait_finished(client: Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{run_id}").json()
        if run["state"] == "finished":
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish: {run}")


def wait_state(run_id: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(id=run_id, state=state).exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {state}")


@pytest.mark.usefixtures("worker")
def test_a_submitted_run_is_executed_recorded_and_its_log_served_from_an_offset() -> None:
    client = api(UserFactory())
    upload = client.post("/api/datasets", {"file": _upload("data.csv", b"name,value\na,1\nb,2\n")})
    assert upload.status_code == 201, upload.content
    code = (
        "import pandas\nframe = pandas.read_csv('/input/data.csv')\n"
        "print('total', frame['value'].sum())\nprint('x' * 100)\n"
        "open('/output/sum.txt', 'w').write(str(frame['value'].sum()))\n"
    )
    created = submit(client, code, dataset_ids=[upload.json()["id"]], limits={"wall_timeout_s": 30, "memory_mib": 256})
    assert created["state"] == "queued"
    run = wait_finished(client, created["id"])
    assert run["outcome"] == "succeeded", run
    assert run["exit_code"] == 0 and run["charged"] is True
    assert run["image"] == {"name": "python", "digest": read_lock()["python"].digest}
    assert run["engine"] == "namespace" and run["isolation"] == "namespace"
    assert run["cpu_s"] is not None and run["peak_memory_bytes"] > 0 and run["wall_s"] > 0
    assert run["peak_memory_bytes"] <= 256 * 1024 * 1024 and run["peak_file_bytes"] == 4096  # sum.txt's page
    assert run["samples"] and all(len(row) == 4 for row in run["samples"])  # t, CPU, memory, files
    assert run["cleanup_ok"] is True and all(check["ok"] for check in run["cleanup"])
    assert [e["state"] for e in run["events"]] == [
        "queued",
        "claimed",
        "admitted",
        "starting",
        "running",
        "exporting",
        "finished",
    ]
    assert run["stdout_bytes"] == len("total 3\n") + 101
    assert run["timings"]["start_s"] > 0 and run["timings"]["total_s"] >= run["timings"]["start_s"]
    [output] = run["outputs"]
    assert output["name"] == "sum.txt" and output["size"] == 1
    download = client.get(output["url"])
    body = b"".join(download.streaming_content)  # type: ignore[attr-defined]
    assert download.status_code == 200 and body == b"3"
    assert download["Content-Disposition"].startswith("attachment") and download["X-Content-Type-Options"] == "nosniff"
    log = client.get(f"/api/runs/{run['id']}/log", {"stream": "stdout", "offset": "8"}).json()
    assert log == {"data": "x" * 100 + "\n", "offset": 8, "next_offset": 109, "complete": True}
    start = client.get(f"/api/runs/{run['id']}/log", {"stream": "stdout", "offset": "0", "limit": "8"}).json()
    assert start["data"] == "total 3\n" and start["next_offset"] == 8 and start["complete"] is False


@pytest.mark.usefixtures("worker")
def test_cancel_mid_run_ends_cancelled_within_two_seconds_with_a_clean_audit() -> None:
    client = api(UserFactory())
    created = submit(client, "import time\nprint('up', flush=True)\ntime.sleep(60)\n", limits={"wall_timeout_s": 60})
    wait_state(created["id"], "running")
    asked = time.monotonic()
    assert client.post(f"/api/runs/{created['id']}/cancel").status_code == 200
    run = wait_finished(client, created["id"], timeout=10)
    assert time.monotonic() - asked < 2.0
    assert run["outcome"] == "cancelled" and run["charged"] is False
    assert run["cleanup_ok"] is True


def _upload(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="text/csv")


def test_a_killed_worker_is_reaped_as_a_sandbox_error_and_nothing_is_left(worker_env: dict[str, str]) -> None:
    from tests.playground.conftest import Worker

    first = Worker(worker_env, beat=True)
    first.start()
    client = api(UserFactory())
    created = submit(client, "import time\nprint('up', flush=True)\ntime.sleep(120)\n", limits={"wall_timeout_s": 120})
    wait_state(created["id"], "running")
    run_key = Run.objects.get(id=created["id"]).id.hex[:16]
    first.kill()  # SIGKILL: the worker, its pool and beat, mid-run
    killed = time.monotonic()
    second = Worker(worker_env, beat=True)  # a restarted worker sweeps; its beat runs the reaper
    second.start()
    try:
        run = wait_finished(client, created["id"], timeout=60)
        assert time.monotonic() - killed < 60
        assert run["outcome"] == "sandbox_error" and run["error"]["code"] == "lost_worker"
        assert run["charged"] is False
        [retry_id] = run["retries"]
        retry = client.get(f"/api/runs/{retry_id}").json()
        assert retry["retry_of"] == created["id"]
        client.post(f"/api/runs/{retry_id}/cancel")
        wait_finished(client, str(retry_id), timeout=30)
        _assert_nothing_left(run_key)
    finally:
        second.stop()


def _assert_nothing_left(run_key: str) -> None:
    from runner.config import SupervisorSettings
    from runner.host import hostfs
    from runner.host.cgroups import CgroupLayout
    from runner.supervisor import Supervisor

    supervisor = Supervisor()
    deadline = time.monotonic() + 20
    while True:
        left = [
            p
            for p in CgroupLayout.detect().parents(SupervisorSettings.from_env().cgroup_parent)
            if (p / run_key).exists()
        ]
        left += [d for d in (supervisor.runs_dir / run_key, supervisor.views_dir / run_key) if d.exists()]
        left += hostfs.mounts_under(supervisor.views_dir / run_key)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == []


def test_a_run_submitted_before_redis_restarts_still_completes(worker_env: dict[str, str], redis_server: Any) -> None:
    from tests.playground.conftest import Worker

    client = api(UserFactory())
    created = submit(client, "print('survived')")
    redis_server.stop()
    redis_server.start()
    late = Worker(worker_env)
    late.start()
    try:
        run = wait_finished(client, created["id"], timeout=60)
        assert run["outcome"] == "succeeded"
        log = client.get(f"/api/runs/{created['id']}/log").json()
        assert log["data"] == "survived\n"
    finally:
        late.stop()
