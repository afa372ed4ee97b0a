"""A run submitted while Redis (the broker) is down is accepted, and starts as soon as Redis is
back: the web process sends it again by itself, without waiting for the reaper."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest
from django.test import Client

from playground.models import Run, RunState
from playground.services.accounts import token_create
from tests.playground.conftest import RedisServer, Worker
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]


def _wait(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_run_submitted_while_the_broker_is_down_starts_once_it_is_back(
    redis_server: RedisServer, worker_env: dict[str, str]
) -> None:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=cast(Any, UserFactory()))}")
    redis_server.stop()
    try:
        response = client.post("/api/runs", json.dumps({"runtime": "python", "code": "print('after the outage')"}),
                               content_type="application/json")  # fmt: skip
        assert response.status_code == 201, response.content
        run_id = response.json()["id"]
        time.sleep(2)  # several resend attempts fail while the broker is away
        assert Run.objects.get(id=run_id).state == RunState.QUEUED
    finally:
        redis_server.start()
    worker = Worker(worker_env)  # and no beat: no reaper re-sends it, the web process must
    worker.start()
    try:
        assert _wait(lambda: Run.objects.get(id=run_id).state == RunState.FINISHED, 60)
        run = Run.objects.get(id=run_id)
        assert run.outcome == "succeeded", (run.outcome, run.reason)
        assert run.started_at is not None
    finally:
        worker.stop()


def test_the_task_a_run_is_sent_as_is_the_one_the_worker_registers() -> None:
    """dispatch sends a run's task by name (it does not import the tasks): that name is the task's."""
    from playground.celery import app
    from playground.services.dispatch import EXECUTE_RUN
    from playground.tasks import execute_run

    assert execute_run.name == EXECUTE_RUN and EXECUTE_RUN in app.tasks


def test_a_worker_survives_redis_lost_with_a_task_in_hand_and_runs_what_is_sent_after_it_restarts_empty(
    redis_server: RedisServer, worker_env: dict[str, str]
) -> None:
    """Redis killed while the worker holds a task (acknowledged late), then back with nothing in it
    (its queues' bindings lost too): the worker stays up (kombu's Redis transport made it exit:
    playground/celery.py), declares its queues again, and a run sent afterwards runs."""
    import redis as redis_client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=cast(Any, UserFactory()))}")
    worker = Worker(worker_env)
    worker.start()
    try:
        code = "import time\nprint('up', flush=True)\ntime.sleep(4)\nprint('done')"
        held = client.post("/api/runs", json.dumps({"runtime": "python", "code": code}),
                           content_type="application/json").json()["id"]  # fmt: skip
        assert _wait(lambda: Run.objects.get(id=held).state == RunState.RUNNING, 30)
        assert redis_server.proc is not None
        redis_server.proc.kill()  # SIGKILL, mid-task
        redis_server.proc.wait(timeout=10)
        redis_server.start()
        redis_client.Redis.from_url(redis_server.url).flushall()  # back empty: no task, no binding
        assert _wait(lambda: Run.objects.get(id=held).state == RunState.FINISHED, 30)
        assert Run.objects.get(id=held).outcome == "succeeded"  # its end is the database's, not Redis's
        after = client.post("/api/runs", json.dumps({"runtime": "python", "code": "print('after')"}),
                            content_type="application/json").json()["id"]  # fmt: skip
        assert _wait(lambda: Run.objects.get(id=after).state == RunState.FINISHED, 60)
        assert Run.objects.get(id=after).outcome == "succeeded"
        assert all(proc.poll() is None for proc in worker.procs), "the worker exited"
    finally:
        worker.stop()
