"""GET /api/runs/{id}/wait, the long poll, through the web server `make run` starts (daphne, the
channel layer on a real Redis) and a real Celery worker: answered when the worker publishes the
run's end, bounded by its timeout, other users' runs unseen, and a waiting request holds up no one
else's."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any, cast

import pytest

from playground.services.accounts import token_create
from tests.playground.conftest import Worker
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]


def _call(base: str, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - our loopback URL
        f"{base}{path}", method=method, data=json.dumps(body).encode() if body else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our loopback URL
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_wait_is_answered_at_the_runs_end_bounded_by_its_timeout_and_holds_up_no_one(
    worker: Worker, web_server: str
) -> None:
    owner, other = UserFactory(), UserFactory()
    token, stranger = token_create(user=cast(Any, owner)), token_create(user=cast(Any, other))
    code = "import time\ntime.sleep(1.5)\nprint('done')"
    status, run = _call(web_server, token, "POST", "/api/runs", {"runtime": "python", "code": code})
    assert status == 201, run

    assert _call(web_server, stranger, "GET", f"/api/runs/{run['id']}/wait?timeout_s=1")[0] == 404
    assert _call(web_server, token, "GET", f"/api/runs/{run['id']}/wait?timeout_s=61")[0] == 422

    # A wait shorter than the run: answered at its timeout, the run not finished yet.
    started = time.monotonic()
    status, early = _call(web_server, token, "GET", f"/api/runs/{run['id']}/wait?timeout_s=0.3")
    took = time.monotonic() - started
    assert status == 200 and early["state"] != "finished" and 0.25 <= took < 1.5, (early["state"], took)

    # A long wait, with 20 others beside it on the same web process: each health check is answered
    # at once meanwhile (a waiting request holds no thread), and the wait as soon as the run ends.
    answered: dict[str, Any] = {"at": []}

    def wait() -> None:
        answered["status"], answered["run"] = _call(web_server, token, "GET", f"/api/runs/{run['id']}/wait")
        answered["at"].append(time.time())

    waiters = [threading.Thread(target=wait) for _ in range(20)]
    for thread in waiters:
        thread.start()
    health: list[float] = []
    while any(thread.is_alive() for thread in waiters) and len(health) < 200:
        begun = time.monotonic()
        assert _call(web_server, token, "GET", "/api/health")[0] == 200
        health.append(time.monotonic() - begun)
    for thread in waiters:
        thread.join(60)
    assert answered["status"] == 200 and answered["run"]["state"] == "finished", answered
    assert answered["run"]["outcome"] == "succeeded" and answered["run"]["stdout_bytes"] == 5
    finished_at = answered["run"]["finished_at"]
    assert finished_at and len(health) >= 3 and max(health) < 0.5, (len(health), max(health))
    # Heard when the worker published the end, not at the next read of the row (every 1 s): the
    # first waiter is answered within a fraction of that after the end's event row was written.
    [end] = [e["at"] for e in answered["run"]["events"] if e["state"] == "finished"]
    late = min(answered["at"]) - datetime.fromisoformat(end.replace("Z", "+00:00")).timestamp()
    assert len(answered["at"]) == 20 and late < 0.3, late
    # Heard, not polled for: a fresh wait on the finished run answers at once.
    started = time.monotonic()
    status, again = _call(web_server, token, "GET", f"/api/runs/{run['id']}/wait")
    assert status == 200 and again["finished_at"] == finished_at and time.monotonic() - started < 1.0
