"""The audit console in a real browser: an admin opens a run's audit page, the overview with its
charts and the CSV export of the filtered run list (fixtures from test_browser.py)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from playground.models import Run, RunEvent
from tests.playground.factories import stored_logs
from tests.playground.test_browser import BROWSER_MARKS, PASSWORD, Browser, chromium, shots, site  # noqa: F401 - fixtures

pytestmark = BROWSER_MARKS


@pytest.fixture
def seeded(site: str) -> Run:  # noqa: F811
    """An admin and another user's finished run, made before the browser starts: Playwright's sync
    API runs an event loop in this thread, where the ORM refuses to run."""
    User.objects.create_superuser("root", password=PASSWORD)
    owner = User.objects.create_user("bea", password=PASSWORD)
    run = Run.objects.create(
        owner=owner, runtime="python", code="print('<b>audited</b>')", state="finished", outcome="failed",
        reason="exit status 1", engine="namespace", isolation="namespace", worker_host="host-a",
        image_name="python", image_digest="sha256:" + "cd" * 32, wall_s=1.3, cpu_s=0.4,
        peak_memory_bytes=30 << 20, stdout_bytes=31, stderr_bytes=10, cleanup_ok=True,
    )  # fmt: skip
    stored_logs(run.id, stdout=b"<script>window.pwned=1</script>", stderr=b"Traceback\n")
    for state, offset_ms in (("queued", 0), ("claimed", 15), ("admitted", 40), ("starting", 42), ("running", 300),
                             ("exporting", 1300), ("finished", 1350)):  # fmt: skip
        event = RunEvent.objects.create(run=run, state=state)
        RunEvent.objects.filter(id=event.id).update(at=run.created_at + timedelta(milliseconds=offset_ms))
    return run


def test_an_admin_audits_a_run_reads_the_overview_and_exports_csv(
    seeded: Run,
    chromium: Browser,  # noqa: F811 - the fixture imported above
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    run = seeded
    page = chromium.page(chromium.context(), "admin")
    page.goto(f"{site}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#overview-link")).to_be_visible()

    # The run's audit page: code, escaped logs, phase times to the millisecond, no Save.
    page.goto(f"{site}/admin/playground/run/{run.id}/change/")
    expect(page.locator("#audit-code pre")).to_have_text("print('<b>audited</b>')")
    expect(page.locator("#audit-stdout pre")).to_have_text("<script>window.pwned=1</script>")
    expect(page.locator("#audit-stderr pre")).to_contain_text("Traceback")
    timeline = page.locator("#audit-timeline")
    expect(timeline).to_contain_text("claimed → admitted")
    expect(timeline).to_contain_text("25 ms")
    expect(timeline).to_contain_text("1.000 s")  # running → exporting
    expect(page.locator("input[name=_save]")).to_have_count(0)
    assert page.evaluate("window.pwned") is None
    page.screenshot(path=str(shots / "audit-run.png"), full_page=True)

    # The overview: the last 7 days by default, a chart drawn by uPlot with its figures beside it;
    # then the last 24 hours, chosen from the ranges.
    page.goto(f"{site}/admin/overview/")
    expect(page.locator("#chart-range canvas")).to_have_count(1)
    expect(page.locator('#overview-range a[aria-current="page"]')).to_have_text("7 days")
    expect(page.locator("#totals")).to_contain_text("failed")
    page.get_by_role("link", name="24 hours", exact=True).click()
    expect(page.locator('#overview-range a[aria-current="page"]')).to_have_text("24 hours")
    expect(page.locator("#chart-range canvas")).to_have_count(1)
    _the_hours_bar_opens_its_runs_and_they_export(page, run, shots, site, tmp_path)


def _the_hours_bar_opens_its_runs_and_they_export(
    page: Any, run: Any, shots_dir: Any, base: Any, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    # The one run is of the current hour: its bar is drawn with the hour's width, not as a line.
    red = page.evaluate("""() => {
        const canvas = document.querySelector("#chart-range canvas");
        const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        let count = 0;
        for (let i = 0; i < data.length; i += 4) {
            if (data[i] > 150 && data[i + 1] < 90 && data[i + 2] < 90 && data[i + 3] > 200) count += 1;
        }
        return count;
    }""")
    assert red > 1500, f"the current hour's bar of failed runs covers {red} pixels"
    expect(page.locator("#percentiles")).to_contain_text("1.300 s")
    expect(page.locator("#images")).to_contain_text("python")
    page.screenshot(path=str(shots_dir / "audit-overview.png"), full_page=True)
    # The bar opens the runs behind it: the run list, filtered to its hour.
    box = page.locator("#chart-range .u-over").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] - 3, box["y"] + box["height"] - 5)
    expect(page).to_have_url(re.compile(r"/admin/playground/run/\?created_at__gte="))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    page.go_back()
    page.get_by_role("link", name="failed").click()  # an outcome's count: its runs of the range
    expect(page).to_have_url(re.compile(r"outcome__exact=failed"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)

    # The CSV export of the filtered list.
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{base}/admin/playground/run/?outcome__exact=failed")
    # At 1400 px every column of the list is in view, ids on one line.
    widths = page.evaluate("""() => ({
        right: document.querySelector('#result_list').getBoundingClientRect().right,
        window: document.querySelector('#result_list').closest('.results').getBoundingClientRect().right,
        columns: [...document.querySelectorAll('#result_list thead th')].map((th) => [th.textContent.trim(),
                  Math.round(th.getBoundingClientRect().width)])})""")
    assert widths["right"] <= widths["window"] + 1, f"the run list is cut in a 1400 px window: {widths}"
    short_id = page.locator("#result_list tbody tr").first.locator("th span[title]")
    assert short_id.evaluate("(span) => span.getClientRects().length") == 1, "the id wraps"  # one line box
    page.screenshot(path=str(shots_dir / "audit-run-list-1400.png"), full_page=True)
    with page.expect_download() as download_info:
        page.click("#export-csv")
    saved = tmp_path / "runs.csv"
    download_info.value.save_as(saved)
    rows = list(csv.reader(io.StringIO(saved.read_text())))
    assert rows[0][0] == "id" and "peak_memory_bytes" in rows[0]
    assert [row[0] for row in rows[1:]] == [str(run.id)]
