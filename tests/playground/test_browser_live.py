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


@pytest.fixture
def refused_run(site: str) -> Run:
    """A notebook whose cell last ran a run that the egress proxy refused twice (made before the
    browser starts, as above)."""
    from playground.models import Notebook

    owner = User.objects.create_user("noor", password=PASSWORD)
    attempt = {"at": 1.0, "method": "CONNECT", "port": 443, "allowed": False, "address": "", "bytes_out": 0,
               "bytes_in": 0, "seconds": 0.01}  # fmt: skip
    record = {"policy": ["pypi.org:443"], "connections": 0, "refused": 2, "bytes_out": 0, "bytes_in": 0, "limit": "",
              "attempts": [{**attempt, "host": "pypi.org", "reason": "pypi.org resolves to 203.0.113.80, a private "
                            "address"}, {**attempt, "host": "example.com", "reason": "not in the policy"}]}  # fmt: skip
    run = Run.objects.create(owner=owner, runtime="python", code="...", state="finished", outcome="failed",
                             reason="exit status 1", egress=["pypi.org:443"], egress_record=record,
                             stderr_bytes=6)  # fmt: skip
    stored_logs(run.id, stdout=b"", stderr=b"boom!\n")
    cell = {"id": "c1", "kind": "code", "runtime": "python", "source": "...", "inputs": [], "limits": {},
            "egress": ["pypi.org:443"], "last_run_id": str(run.id)}  # fmt: skip
    Notebook.objects.create(owner=owner, name="net", cells=[cell], cell_count=1)
    return run


def test_a_cell_says_which_requests_its_run_was_refused_and_links_the_run_page(
    refused_run: Run,
    chromium: Browser,  # noqa: F811 - the fixture imported above
    site: str,
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in("noor")
    cell = page.locator("section.cell").first
    expect(cell.locator(".run-view")).to_have_attribute("data-outcome", "failed", timeout=30_000)
    refused = cell.locator(".egress-refused li")
    expect(refused).to_have_text([
        "refused CONNECT pypi.org:443: pypi.org resolves to 203.0.113.80, a private address",
        "refused CONNECT example.com:443: not in the policy",
    ])  # fmt: skip
    expect(cell.get_by_role("link", name="Run page")).to_have_attribute("href", f"/runs/{refused_run.id}/")
    page.goto(f"{site}/runs/{refused_run.id}/")  # its own page does not link itself
    expect(page.locator("#run-view")).to_have_attribute("data-outcome", "failed", timeout=30_000)
    expect(page.locator("#run-view").get_by_role("link", name="Run page")).to_have_count(0)
