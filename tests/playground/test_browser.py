"""The playground in a real browser: Debian's Chromium driven by Playwright, against daphne with
a real Redis and Celery worker. Screenshots land in the test's output directory."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from runner.config import paths_from_env
from tests.playground.conftest import serve_web

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.images,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]

TRANSFORM = "\n".join(
    [
        "import json, time, pandas",
        "frame = pandas.read_csv('/input/people.csv')",
        "for i in range(3): print(f'tick {i}', flush=True); time.sleep(1)",
        "json.dump({'rows': len(frame), 'total': int(frame['age'].sum())}, open('/output/summary.json', 'w'))",
    ]
)
READER = (
    "const s = JSON.parse(require('fs').readFileSync('/input/summary.json', 'utf8')); console.log('total is', s.total);"
)


@pytest.fixture
def site(worker: Any, worker_env: dict[str, str]) -> Iterator[str]:
    with serve_web(worker_env) as base:
        yield base


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    return folder


def test_analyst_uploads_transforms_watches_live_downloads_chains_and_sees_a_timeout(
    site: str, shots: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_user("ana", password="a long enough password")
    csv = tmp_path / "people.csv"
    csv.write_text("name,age\nada,36\nalan,41\ngrace,85\n")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        page.goto(f"{site}/accounts/login/")
        page.fill("#id_username", "ana")
        page.fill("#id_password", "a long enough password")
        page.click("button[type=submit]")
        expect(page).to_have_url(f"{site}/playground/")

        page.goto(f"{site}/datasets/")
        page.set_input_files("#file", str(csv))
        expect(page.locator("#dataset-list")).to_contain_text("people.csv")
        page.screenshot(path=shots / "datasets-1280.png", full_page=True)

        page.goto(f"{site}/playground/")
        first = page.locator("section.cell").nth(0)
        expect(first.locator(".cm-content")).to_be_visible()
        _type_code(page, first, TRANSFORM)
        first.get_by_label("people.csv").check()
        first.locator("button.run").click()
        stdout = first.locator("pre.stdout")
        expect(stdout).to_contain_text("tick 0", timeout=30_000)
        assert first.locator(".run-view").get_attribute("data-state") != "finished"  # seen live, before the end
        expect(first.locator(".run-view")).to_have_attribute("data-outcome", "succeeded", timeout=60_000)
        expect(stdout).to_contain_text("tick 2")
        expect(first.locator(".badge")).to_have_text("succeeded")
        page.screenshot(path=shots / "notebook-after-transform-1280.png", full_page=True)

        with page.expect_download() as download_info:
            first.get_by_role("link", name="summary.json").click()
        summary = json.loads(Path(download_info.value.path()).read_text())
        assert summary == {"rows": 3, "total": 162}

        first.get_by_role("button", name="Use in next cell").click()
        second = page.locator("section.cell").nth(1)
        expect(second.locator(".chip")).to_contain_text("summary.json")
        expect(second.locator("select.runtime")).to_have_value("node")
        _type_code(page, second, READER)
        second.locator("button.run").click()
        expect(second.locator(".run-view")).to_have_attribute("data-outcome", "succeeded", timeout=60_000)
        expect(second.locator("pre.stdout")).to_contain_text("total is 162")

        page.click("#add-python")
        third = page.locator("section.cell").nth(2)
        _type_code(page, third, "while True: pass")
        third.locator("details.limits summary").click()
        third.locator("input[name=wall_timeout_s]").fill("2")
        third.locator("input[name=wall_timeout_s]").dispatch_event("change")
        third.locator("button.run").click()
        expect(third.locator(".run-view")).to_have_attribute("data-outcome", "timed_out", timeout=60_000)
        expect(third.locator(".reason")).to_have_text("stopped after the 2 s wall-clock limit")
        page.screenshot(path=shots / "notebook-1280.png", full_page=True)
        page.set_viewport_size({"width": 800, "height": 900})
        page.screenshot(path=shots / "notebook-800.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= 800  # no sideways scrolling

        page.goto(f"{site}/runs/")
        expect(page.locator("table")).to_contain_text("timed_out")
        page.locator("table a").first.click()
        expect(page.locator("#run-view")).to_have_attribute("data-outcome", "timed_out", timeout=30_000)
        expect(page.locator("#chart canvas, #chart")).not_to_have_count(0)
        page.screenshot(path=shots / "run-detail-800.png", full_page=True)
        browser.close()
    assert not [e for e in errors if "Content Security Policy" in e], errors
    keep = paths_from_env().data_dir / "screenshots"
    shutil.copytree(shots, keep, dirs_exist_ok=True)


def _type_code(page: Any, cell: Any, code: str) -> None:
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)
