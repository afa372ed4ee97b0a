"""Ready sandboxes through the product: a real Celery worker with CORDON_READY on, runs submitted
through the API, and what the run record, doctor and the sweep say of them (runner.ready)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runner import upkeep
from runner.doctor import ready_checks
from runner.host.cgroups import CgroupLayout
from runner.ready import PREFIX, ReadySettings
from runner.supervisor import Supervisor
from tests.playground.conftest import Worker, api
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import submit, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]


def test_a_workers_second_run_takes_a_ready_sandbox_and_the_record_and_doctor_say_so(
    worker_env: dict[str, str],
) -> None:
    env = {**worker_env, "CORDON_READY": "true", "CORDON_READY_WAIT_S": "30"}
    worker = Worker(env, concurrency=1)
    worker.start()
    try:
        client = api(UserFactory())
        first = wait_finished(client, submit(client, "print('one')")["id"])
        assert first["outcome"] == "succeeded" and first["sandbox_start"] == "cold"
        assert "sandbox started cold: no ready sandbox of its class yet" in first["engine_note"]
        doctor = Supervisor(ready=ReadySettings(enabled=True))
        made = _wait_listed(doctor)  # made once the worker is idle: a person's next run finds it
        assert made.ok and "1 ready, 0 in use" in made.detail and "claimed 0" in made.detail, made
        second = wait_finished(client, submit(client, "import sys\nprint(sys.argv)")["id"])
        assert second["outcome"] == "succeeded", second
        assert second["sandbox_start"] == "ready" and "cold" not in second["engine_note"]
        assert client.get(f"/api/runs/{second['id']}/log", {"stream": "stdout"}).json()["data"] == "['/tmp/main.py']\n"
        assert second["timings"]["handover_s"] is not None and second["timings"]["staging_s"] is not None
        checks = {check["name"]: check["ok"] for check in second["cleanup"]}
        assert checks["single use"] and all(checks.values())
        listed = _wait_listed(doctor, claimed=1)
        assert listed.ok and "1 ready, 0 in use, 0 failures in a row" in listed.detail, listed
    finally:
        worker.stop()
    # Stopped as the tests stop it (SIGTERM to its whole process group), its pool process may have
    # had no time to tear its waiting sandbox down: the sweep a restarted worker runs removes it.
    supervisor = Supervisor()
    upkeep.sweep(supervisor)
    parents = CgroupLayout.detect().parents(supervisor.settings.cgroup_parent)
    left = [p.name for parent in parents if parent.exists() for p in parent.iterdir() if p.name.startswith(PREFIX)]
    left += [p.name for p in supervisor.views_dir.iterdir() if p.name.startswith(PREFIX)]
    assert left == []


def _wait_listed(supervisor: Supervisor, claimed: int = 0, timeout_s: float = 30) -> Any:
    """Doctor's line for the worker's python/bare class, once a sandbox of it is ready after
    `claimed` of them were taken."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [c for c in ready_checks(supervisor) if c.name.startswith("ready python/bare")]
        wanted = found and "1 ready" in found[0].detail and f"claimed {claimed}," in found[0].detail
        if wanted or time.monotonic() > deadline:
            assert found, [c.detail for c in ready_checks(supervisor)]
            return found[0]
        time.sleep(0.2)
