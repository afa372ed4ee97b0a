"""Worker hosts on one machine's test stack: a drained host takes no new run (one it had reserved is
sent back) until resumed; routing skips draining hosts; the admin drains; a run's log is read from
Redis while it goes and from storage once it ended (the reaper stores a lost run's from Redis);
inputs whose bytes do not match their checksum never reach a sandbox; a worker's own debris is
swept once its run is over."""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client
from django.conf import settings
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from playground import logs
from playground.models import Run, RunState, WorkerHost
from playground.selectors.hosts import live_engines
from playground.services import datasets as dataset_services
from playground.services import execution, runs
from playground.services.hosts import hosts_drain, worker_debris_sweep
from tests.playground.conftest import Worker, api
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import submit, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]
HERE = settings.CORDON_HOST_NAME


def _host(
    name: str, *, engines: tuple[str, ...] = ("namespace",), age_s: float = 0, draining: bool = False
) -> WorkerHost:
    return WorkerHost.objects.create(
        name=name, engines=list(engines), heartbeat_at=timezone.now() - timedelta(seconds=age_s), draining=draining
    )


def test_routing_skips_hosts_not_heard_from_and_hosts_being_drained() -> None:
    _host("a", engines=("namespace",))
    _host("b", engines=("smolvm",), draining=True)
    _host("c", engines=("smolvm",), age_s=3600)
    assert live_engines() == {"namespace"}
    hosts_drain(names=["b"], draining=False)
    assert live_engines() == {"namespace", "smolvm"}
    hosts_drain(names=["a", "b"], draining=True)
    assert live_engines() == set()


def test_the_admin_drains_and_resumes_a_host_and_shows_what_it_holds(admin_client: Client) -> None:
    busy = _host("busy")
    user: Any = UserFactory()
    Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING, worker_host="busy")
    url = "/admin/playground/workerhost/"
    response = admin_client.post(url, {"action": "drain_hosts", "_selected_action": [busy.pk]}, follow=True)
    assert "Draining 1 host(s): busy" in response.content.decode()
    host = WorkerHost.objects.get(name="busy")
    assert host.draining and host.drain_requested_at is not None
    page = admin_client.get(url).content.decode()
    assert "draining" in page and "drained (holds no runs)" not in page
    Run.objects.filter(worker_host="busy").update(state=RunState.FINISHED)
    assert "drained (holds no runs)" in admin_client.get(url).content.decode()
    admin_client.post(url, {"action": "resume_hosts", "_selected_action": [busy.pk]})
    assert not WorkerHost.objects.get(name="busy").draining


def test_staff_without_the_change_permission_cannot_drain(client: Client) -> None:
    from django.contrib.auth.models import Permission

    host = _host("h")
    staff: Any = UserFactory(is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_workerhost"))
    client.force_login(staff)
    page = client.get("/admin/playground/workerhost/")
    assert page.status_code == 200 and "drain_hosts" not in page.content.decode()
    client.post("/admin/playground/workerhost/", {"action": "drain_hosts", "_selected_action": [host.pk]})
    assert not WorkerHost.objects.get(name="h").draining


def test_a_drained_host_sends_back_what_it_reserved_takes_nothing_and_resumes(worker_env: dict[str, str]) -> None:
    """The real worker: drained after it started consuming, so the run's task still reaches it; it
    sends the task back and stops consuming; resumed, its host loop consumes again and runs it."""
    worker = Worker(worker_env)
    worker.start()
    try:
        _host("elsewhere")  # another live host serves the engine, so the run is accepted
        WorkerHost.objects.filter(name=HERE).delete()
        deadline = time.monotonic() + 15
        while not WorkerHost.objects.filter(name=HERE).exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # the worker's host loop writes its row again on its first round
        assert WorkerHost.objects.filter(name=HERE).exists()
        hosts_drain(names=[HERE], draining=True)
        client = api(UserFactory())
        run_id = submit(client, "print('ran')")["id"]
        time.sleep(8)  # the task reached the drained worker (it was consuming) and went back
        run = Run.objects.get(id=run_id)
        assert run.state == RunState.QUEUED and run.worker_host == ""
        hosts_drain(names=[HERE], draining=False)
        finished = wait_finished(client, run_id, timeout=60)
        assert finished["outcome"] == "succeeded" and Run.objects.get(id=run_id).worker_host == HERE
    finally:
        worker.stop()


def test_a_running_runs_log_comes_from_redis_and_a_finished_ones_from_storage(worker: Worker) -> None:
    client = api(UserFactory())
    code = "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')"
    run_id = submit(client, code)["id"]
    deadline = time.monotonic() + 30
    seen = ""
    while "first" not in seen and time.monotonic() < deadline:
        seen = client.get(f"/api/runs/{run_id}/log?stream=stdout").json()["data"]
        time.sleep(0.1)
    assert seen == "first\n"
    assert Run.objects.get(id=run_id).state != RunState.FINISHED
    r = redis_client.Redis.from_url(settings.REDIS_URL)
    assert r.get(f"cordon:log:{run_id}:stdout") == b"first\n"
    wait_finished(client, run_id, timeout=30)
    with default_storage.open(logs.stored_name(run_id, "stdout")) as stored:
        assert stored.read() == b"first\nsecond\n"
    assert r.exists(f"cordon:log:{run_id}:stdout") == 0
    assert not logs.spool_path(run_id, "stdout").exists()
    assert client.get(f"/api/runs/{run_id}/log?stream=stdout").json()["data"] == "first\nsecond\n"


@pytest.mark.usefixtures("no_worker")  # no reaper but the test's (the shared worker's host loop reaps too)
def test_the_reaper_stores_a_lost_runs_log_from_redis(redis_server: Any) -> None:
    user: Any = UserFactory()
    past = timezone.now() - timedelta(seconds=5)
    run = Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING, worker_host="gone",
                             lease_expires_at=past)  # fmt: skip
    logs.log_append(run_id=run.id, stream="stdout", offset=0, data=b"before the host died\n")
    logs.spool_path(run.id, "stdout").unlink()  # the spool was on the host that died
    assert runs.reap() == 1
    run.refresh_from_db()
    assert (run.outcome, run.error_code) == ("sandbox_error", "lost_worker")
    with default_storage.open(logs.stored_name(run.id, "stdout")) as stored:
        assert stored.read() == b"before the host died\n"


def test_an_input_whose_bytes_do_not_match_its_checksum_never_reaches_a_sandbox(redis_server: Any) -> None:
    user: Any = UserFactory()
    dataset = dataset_services.dataset_create(user=user, upload=SimpleUploadedFile("d.csv", b"a,b\n1,2\n"))
    with open(dataset.file.path, "wb") as handle:  # the filesystem storage: tampered with at rest
        handle.write(b"a,b\n1,3\n")
    run = Run.objects.create(owner=user, runtime="python", code="print(open('/input/d.csv').read())",
                             engine_requested="namespace", queue="namespace")  # fmt: skip
    run.datasets.set([dataset])
    final = execution.run_execute(run_id=str(run.id), worker=HERE)
    assert final is not None
    assert (final.outcome, final.error_code, final.charged) == ("sandbox_error", "storage_integrity", False)
    assert "sha256" in final.error_message and final.cleanup_ok
    assert not Run.objects.filter(retry_of=run).exists()  # the same bytes would fail again
    assert not execution.work_dir(run.id).exists()


def test_a_workers_own_debris_is_swept_once_its_run_is_over() -> None:
    user: Any = UserFactory()
    over = Run.objects.create(owner=user, runtime="python", code="1", state=RunState.FINISHED)
    going = Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    unknown = uuid.uuid4()
    dirs = {
        "over": execution.work_dir(over.id),
        "going": execution.work_dir(going.id),
        "unknown": logs.spool_path(unknown, "stdout").parent,
        "fresh": logs.spool_path(over.id, "stdout").parent,
    }
    for directory in dirs.values():
        directory.mkdir(parents=True)
        (directory / "f").write_bytes(b"x")
    hour_ago = time.time() - 3600
    for key in ("over", "going", "unknown"):
        os.utime(dirs[key], (hour_ago, hour_ago))
    swept = worker_debris_sweep(min_age_s=60)
    assert sorted(swept) == sorted([f"work {over.id}", f"logs {unknown}"])
    assert [k for k, d in dirs.items() if d.exists()] == ["going", "fresh"]
    worker_debris_sweep(min_age_s=0)  # a worker's start: its finished runs' at once
    assert [k for k, d in dirs.items() if d.exists()] == ["going"]
    for directory in dirs.values():
        if directory.exists():
            for f in directory.iterdir():
                f.unlink()
            directory.rmdir()


def test_a_host_name_of_its_own_is_what_runs_record(worker: Worker) -> None:
    client = api(UserFactory())
    run_id = submit(client, "print(1)")["id"]
    wait_finished(client, run_id, timeout=30)
    assert Run.objects.get(id=run_id).worker_host == HERE == WorkerHost.objects.get().name
    assert Path(settings.DATA_DIR, "work").is_dir() and not any(Path(settings.DATA_DIR, "work").iterdir())
