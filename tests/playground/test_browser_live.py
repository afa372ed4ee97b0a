"""A run's page in a real browser shows a long log whole: its socket replays only the log's last
MiB, and the page reads what comes before from the log API (fixtures from test_browser.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from playground.consumers import REPLAY_TAIL_BYTES
from playground.models import Run
from tests.playground.conftest import serve_web
from tests.playground.factories import stored_logs
from tests.playground.test_browser import CHROMIUM, PASSWORD, Browser, chromium  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]

LOG = "".join(f"line {n:07} of a long log, ünïcode ✓\n" for n in range(90_000)).encode()  # about 3.6 MiB


@pytest.fixture
def site(worker_env: dict[str, str]) -> Iterator[str]:
    """The web server alone: the run below is finished, no worker is needed."""
    with serve_web(worker_env) as base:
        yield base


@pytest.fixture
def long_run(site: str) -> Run:
    """Made before the browser starts: Playwright's sync API runs an event loop in this thread."""
    owner = User.objects.create_user("lin", password=PASSWORD)
    run = Run.objects.create(owner=owner, runtime="python", code="...", state="finished", outcome="succeeded",
                             stdout_bytes=len(LOG), stderr_bytes=5)  # fmt: skip
    stored_logs(run.id, stdout=LOG, stderr=b"done\n")
    return run


def test_a_run_page_shows_a_log_longer_than_the_sockets_replay_whole(
    long_run: Run,
    chromium: Browser,  # noqa: F811 - the fixture imported above
    site: str,
) -> None:
    from playwright.sync_api import expect

    assert len(LOG) > 3 * REPLAY_TAIL_BYTES
    page = chromium.logged_in("lin")
    log_reads: list[str] = []
    page.on("request", lambda request: log_reads.append(request.url) if "/log?" in request.url else None)
    page.goto(f"{site}/runs/{long_run.id}/")
    expect(page.locator("[data-outcome=succeeded]")).to_be_visible(timeout=60_000)
    shown: Any = page.evaluate(
        """() => Array.from(document.querySelectorAll("pre.stream")).map((pane) => pane.textContent)"""
    )
    assert hashlib.sha256(shown[0].encode()).hexdigest() == hashlib.sha256(LOG).hexdigest()
    assert shown[1] == "done\n"
    assert any("stream=stdout&offset=0" in url for url in log_reads), log_reads  # the refill, from the start
