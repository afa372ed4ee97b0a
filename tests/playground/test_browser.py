"""The playground in a real browser: Debian's Chromium driven by Playwright, against daphne with
a real Redis and Celery worker. Screenshots land in the test's output directory (and are copied
to the data directory's screenshots/ folder)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from runner.config import paths_from_env
from runner.spec import Outcome
from tests.playground.conftest import serve_web

CHROMIUM = shutil.which("chromium")
# Every browser test's marks (the other test_browser_*.py files take them from here).
BROWSER_MARKS = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.images,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]
pytestmark = BROWSER_MARKS

PASSWORD = "a long enough password"
NOTEBOOK_URL = re.compile(r"/notebooks/[0-9a-f-]{36}/$")
RUN_S = 60_000  # ms: how long a short run may take from Run to its outcome on a busy host
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}

PEOPLE = "name,age\nada,36\nalan,9\ngrace,85\n"
TRANSFORM = "\n".join(
    [
        "import json, time, pandas",
        "frame = pandas.read_csv('/input/people.csv')",
        "for i in range(3): print(f'tick {i}', flush=True); time.sleep(1)",
        "json.dump({'rows': len(frame), 'total': int(frame['age'].sum())}, open('/output/summary.json', 'w'))",
        "frame.to_csv('/output/ages.csv', index=False)",
    ]
)
READER = (
    "const s = JSON.parse(require('fs').readFileSync('/input/summary.json', 'utf8')); console.log('total is', s.total);"
)
MARKDOWN = (
    "# Results\n\nSee *the totals* above.\n\n<script>window.pwned = 1</script>\n\n"
    '<img src="/favicon.ico" onerror="window.pwned = 2">\n\n[a link](javascript:window.pwned=3)'
)
TICKS = "import time\nfor i in range(8):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.5)"
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])"
WRITES_IMAGES = "\n".join(
    [
        "import base64",
        "png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=='",
        "open('/output/dot.png', 'wb').write(base64.b64decode(png))",
        'svg = (\'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40">\'',
        '       \'<circle cx="20" cy="20" r="15" fill="none" stroke="teal" stroke-width="4"/>\'',
        "       '<script>parent.pwned = 1; window.pwned = 1</script></svg>')",
        "open('/output/ring.svg', 'w').write(svg)",
    ]
)


@pytest.fixture
def site(worker: Any, worker_env: dict[str, str]) -> Iterator[str]:
    with serve_web(worker_env) as base:
        yield base


@pytest.fixture
def shots(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    yield folder
    shutil.copytree(folder, paths_from_env().data_dir / "screenshots", dirs_exist_ok=True)


class Browser:
    """Chromium, with every page's console errors and uncaught exceptions collected."""

    def __init__(self, browser: Any, site: str):
        self.browser = browser
        self.site = site
        self.errors: list[tuple[str, str]] = []

    def context(self) -> Any:
        return self.browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)

    def page(self, context: Any, label: str = "page") -> Any:
        page = context.new_page()
        page.on("console", lambda m: self.errors.append((label, f"{m.text} {m.location.get('url', '')}"))
                if m.type == "error" else None)  # fmt: skip
        page.on("pageerror", lambda e: self.errors.append((label, f"uncaught: {e}")))
        return page

    def logged_in(self, username: str = "ana") -> Any:
        from playwright.sync_api import expect

        page = self.page(self.context())
        page.goto(f"{self.site}/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        expect(page).to_have_url(NOTEBOOK_URL)  # /playground/ opens the most recent notebook
        expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
        return page


def expect_fits_a_phone(page: Any, path: Path) -> None:
    """A screenshot at a 390 px phone's width (then back to the desktop's): the page must not scroll
    sideways there."""
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(200)
    wide = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=path, full_page=True)
    page.set_viewport_size(DESKTOP)
    assert wide <= PHONE["width"], f"{page.url} is {wide} px wide at {PHONE['width']} px"


@pytest.fixture
def chromium(site: str) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    User.objects.create_user("ana", password=PASSWORD)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        driven = Browser(browser, site)
        yield driven
        browser.close()
    assert not driven.errors, driven.errors


def test_analyst_keeps_two_notebooks_with_markdown_tables_and_chained_outputs_across_reloads(
    chromium: Browser, site: str, shots: Path, tmp_path: Path
) -> None:
    page = chromium.logged_in()
    first_url = page.url
    _a_dataset_previewed_as_a_sorted_table(page, shots, site, tmp_path)
    _cell_one_reads_it_and_writes_outputs(first_url, page)
    _cell_two_keeps_its_runtime(page)
    rendered = _cell_three_is_markdown_rendered_by_the_server(page)
    _cell_four_runs_and_makes_cell_five(page, rendered, shots)
    fourth = _after_a_reload_every_cell_shows_its_run(page)
    _use_in_next_cell_makes_one(fourth, page, shots)
    second_url = _a_second_notebook_keeps_its_own(first_url, page)
    _duplicate_then_delete_the_copy(page, second_url)
    _export_as_ipynb(first_url, page)


def _a_dataset_previewed_as_a_sorted_table(page: Any, shots_dir: Any, base: Any, tmp_path: Any) -> None:
    from playwright.sync_api import expect

    # A dataset, previewed as a table sorted by a column's values, not their text.
    csv = tmp_path / "people.csv"
    csv.write_text(PEOPLE)
    page.goto(f"{base}/datasets/")
    page.set_input_files("#file", str(csv))
    expect(page.locator("#dataset-list")).to_contain_text("people.csv")
    page.get_by_role("button", name="preview people.csv").click()
    table = page.locator("#preview table")
    expect(table.locator("th").nth(1)).to_contain_text("integer")
    table.get_by_role("button", name="sort by age").click()
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text("alan")
    page.screenshot(path=shots_dir / "datasets-1280.png", full_page=True)


def _cell_one_reads_it_and_writes_outputs(first_url: Any, page: Any) -> None:
    from playwright.sync_api import expect

    # Cell 1: reads the dataset, prints live, writes a JSON and a CSV.
    page.goto(first_url)
    first = _cell(page, 0)
    _type_code(page, first, TRANSFORM)
    first.get_by_label("add a dataset as input").select_option(label="people.csv")
    expect(first.locator(".chip")).to_have_text(re.compile("people.csv"))
    first.get_by_role("button", name="run this cell").click()
    stdout = first.locator("pre.stdout")
    expect(stdout).to_contain_text("tick 0", timeout=RUN_S)
    assert first.locator(".run-view").get_attribute("data-state") != "finished"  # seen live, before the end
    expect(first.get_by_role("button", name="stop this run")).to_be_visible()
    _expect_outcome(first, "succeeded")
    expect(stdout).to_contain_text("tick 2")
    expect(first.locator(".figures").first).to_contain_text(re.compile(r"memory [0-9.]+ (KiB|MiB)"))
    with page.expect_download() as download_info:
        first.get_by_role("link", name="summary.json").click()
    assert json.loads(Path(download_info.value.path()).read_text()) == {"rows": 3, "total": 130}
    first.get_by_role("button", name="preview ages.csv").click()
    preview = first.locator(".output-preview table")
    expect(preview.locator("caption")).to_have_text("3 rows")
    preview.get_by_role("button", name="sort by age").click()
    expect(preview.locator("tbody tr").first).to_contain_text("alan")
    preview.get_by_role("button", name="sort by age").click()  # again: the other way
    expect(preview.locator("tbody tr").first).to_contain_text("grace")


def _cell_two_keeps_its_runtime(page: Any) -> None:
    from playwright.sync_api import expect

    # Cell 2 takes the notebook's runtime; made JavaScript, it keeps that when chained into.
    page.click("#add-code")
    second = _cell(page, 1)
    expect(second.locator("select.cell-type")).to_have_value("python")
    second.locator("select.cell-type").select_option("node")


def _cell_three_is_markdown_rendered_by_the_server(page: Any) -> Any:
    from playwright.sync_api import expect

    # Cell 3: markdown, rendered by the server (its <script> is not run), Shift+Enter moves on.
    page.click("#add-markdown")
    third = _cell(page, 2)
    _type_code(page, third, MARKDOWN)
    page.keyboard.press("Shift+Enter")
    rendered = third.locator(".markdown-view")
    expect(rendered.locator("h1")).to_have_text("Results")
    expect(rendered.locator("em")).to_have_text("the totals")
    expect(rendered.locator("script, img")).to_have_count(0)  # raw HTML is shown as text, never run
    expect(rendered).to_contain_text("<script>window.pwned = 1</script>")
    expect(page.locator("section.cell")).to_have_count(4)  # Shift+Enter on the last cell made one
    return rendered


def _cell_four_runs_and_makes_cell_five(page: Any, rendered: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # Cell 4: typed straight away (the new cell has the focus), Shift+Enter runs it and makes cell 5.
    fourth = _cell(page, 3)
    expect(fourth.locator(".cm-editor")).to_have_class(re.compile("cm-focused"))
    rendered.get_by_text("a link").click()
    assert page.evaluate("window.pwned") is None
    fourth.locator("select.cell-type").select_option("python")
    _type_code(page, fourth, "open('/output/four.txt', 'w').write('4')\nprint('four')")
    page.keyboard.press("Shift+Enter")
    expect(page.locator("section.cell")).to_have_count(5)
    _expect_outcome(fourth, "succeeded")
    expect(_cell(page, 4).locator("select.cell-type")).to_have_value("python")
    _expect_saved(page)
    page.screenshot(path=shots_dir / "notebook-before-reload-1280.png", full_page=True)


def _after_a_reload_every_cell_shows_its_run(page: Any) -> Any:
    from playwright.sync_api import expect

    # After a reload every cell shows its last run, and chaining still works.
    page.reload()
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    first, second, third, fourth = (_cell(page, i) for i in range(4))
    _expect_outcome(first, "succeeded")
    expect(first.locator("pre.stdout")).to_have_text("tick 0\ntick 1\ntick 2\n")
    expect(third.locator(".markdown-view h1")).to_have_text("Results")
    expect(second.locator("select.cell-type")).to_have_value("node")
    first.get_by_role("button", name="use summary.json in the next cell").click()
    expect(second.locator(".chip")).to_contain_text("summary.json")
    expect(second.locator("select.cell-type")).to_have_value("node")  # the cell keeps its runtime
    _type_code(page, second, READER)
    page.keyboard.press("Control+Enter")  # runs in place
    _expect_outcome(second, "succeeded")
    expect(second.locator("pre.stdout")).to_contain_text("total is 130")
    return fourth


def _use_in_next_cell_makes_one(fourth: Any, page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # With no cell after it, "Use in next cell" makes one of the same runtime (a Python one here).
    _cell(page, 4).get_by_role("button", name="delete this cell").click()
    expect(page.locator("section.cell")).to_have_count(4)
    fourth.get_by_role("button", name="use four.txt in the next cell").click()
    fifth = _cell(page, 4)
    expect(fifth.locator(".chip")).to_contain_text("four.txt")
    expect(fifth.locator("select.cell-type")).to_have_value("python")
    fifth.get_by_role("button", name="move this cell up").click()
    expect(_cell(page, 3).locator(".chip")).to_contain_text("four.txt")
    _cell(page, 3).get_by_role("button", name="move this cell down").click()
    expect(_cell(page, 4).locator(".chip")).to_contain_text("four.txt")
    fourth.get_by_role("button", name="clear this cell's output").click()
    expect(fourth.locator(".run-view")).to_be_hidden()
    page.fill("#notebook-name", "Analysis")
    page.press("#notebook-name", "Enter")
    expect(page.locator("#notebook-list [aria-current=page]")).to_have_text("Analysis")
    _expect_saved(page)
    page.screenshot(path=shots_dir / "notebook-1280.png", full_page=True)
    page.set_viewport_size({"width": 800, "height": 900})
    page.screenshot(path=shots_dir / "notebook-800.png", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 800  # no sideways scrolling
    page.set_viewport_size({"width": 1280, "height": 900})


def _a_second_notebook_keeps_its_own(first_url: Any, page: Any) -> Any:
    from playwright.sync_api import expect

    # A second notebook, then back: each keeps its own cells and runs.
    page.click("#new-notebook")
    expect(page).not_to_have_url(first_url)
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    second_url = page.url
    expect(page.locator("#notebook-list li")).to_have_count(2)
    expect(page.locator("section.cell")).to_have_count(1)
    only = _cell(page, 0)
    _type_code(page, only, "print('second notebook')")
    only.get_by_role("button", name="run this cell").click()
    _expect_outcome(only, "succeeded")
    page.get_by_role("link", name="Analysis").click()
    expect(page).to_have_url(first_url)
    expect(page.locator("section.cell")).to_have_count(5)
    expect(_cell(page, 1).locator("pre.stdout")).to_contain_text("total is 130", timeout=RUN_S)
    expect(_cell(page, 2).locator(".markdown-view h1")).to_have_text("Results")
    expect(_cell(page, 3).locator(".run-view")).to_be_hidden()  # cleared stays cleared
    expect(_cell(page, 4).locator(".chip")).to_contain_text("four.txt")
    page.get_by_role("link", name="Notebook 2").click()
    expect(page).to_have_url(second_url)
    expect(page.locator("section.cell")).to_have_count(1)
    expect(_cell(page, 0).locator("pre.stdout")).to_have_text("second notebook\n", timeout=RUN_S)
    return second_url


def _duplicate_then_delete_the_copy(page: Any, second_url: Any) -> None:
    from playwright.sync_api import expect

    # Duplicate (cells and last runs copied), then delete the copy.
    page.click("#duplicate-notebook")
    expect(page).not_to_have_url(second_url)
    expect(page.locator("#notebook-name")).to_have_value(re.compile(r"\(copy\)$"))
    expect(_cell(page, 0).locator("pre.stdout")).to_have_text("second notebook\n", timeout=RUN_S)
    expect(page.locator("#notebook-list li")).to_have_count(3)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-notebook")
    expect(page).to_have_url(NOTEBOOK_URL)
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    expect(page.locator("#notebook-list li")).to_have_count(2)
    expect(page.locator("#notebook-list")).not_to_contain_text("(copy)")


def _export_as_ipynb(first_url: Any, page: Any) -> None:
    # Export as .ipynb: code and markdown cells, the last stdout as a stream output.
    page.goto(first_url)
    with page.expect_download() as download_info:
        page.click("#export-notebook")
    exported = json.loads(Path(download_info.value.path()).read_text())
    assert exported["nbformat"] == 4
    assert [c["cell_type"] for c in exported["cells"]] == ["code", "code", "markdown", "code", "code"]
    assert "tick 2" in "".join(exported["cells"][0]["outputs"][0]["text"])


def test_a_run_reattaches_after_a_reload_stops_on_request_and_run_all_stops_at_the_first_failure(
    chromium: Browser, site: str, shots: Path
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    ticking = _cell(page, 0)
    _type_code(page, ticking, TICKS)
    ticking.get_by_role("button", name="run this cell").click()
    expect(ticking.locator("pre.stdout")).to_contain_text("tick 1", timeout=RUN_S)
    _expect_saved(page)
    page.reload()
    ticking = _cell(page, 0)
    expect(ticking.locator("pre.stdout")).to_contain_text("tick 1")
    assert ticking.locator(".run-view").get_attribute("data-state") != "finished"  # live again, not done
    expect(ticking.get_by_role("button", name="stop this run")).to_be_visible()
    expect(ticking.get_by_role("button", name="run this cell")).to_be_disabled()
    page.screenshot(path=shots / "notebook-reattached-1280.png", full_page=True)
    _expect_outcome(ticking, "succeeded")
    expect(ticking.locator("pre.stdout")).to_have_text("".join(f"tick {i}\n" for i in range(8)))
    expect(ticking.get_by_role("button", name="run this cell")).to_be_enabled()

    page.click("#add-code")
    waiting = _cell(page, 1)
    _type_code(page, waiting, "import time\nprint('waiting', flush=True)\ntime.sleep(60)")
    waiting.get_by_role("button", name="run this cell").click()
    expect(waiting.locator("pre.stdout")).to_contain_text("waiting", timeout=RUN_S)
    waiting.get_by_role("button", name="stop this run").click()
    _expect_outcome(waiting, "cancelled", timeout=30_000)
    expect(waiting.get_by_role("button", name="stop this run")).to_be_hidden()

    # Run all in a new notebook: it stops at the first cell that does not succeed, and says so.
    page.click("#new-notebook")
    expect(page.locator("#notebook-list li")).to_have_count(2)
    _type_code(page, _cell(page, 0), "print('one')")
    page.click("#add-code")
    _type_code(page, _cell(page, 1), "while True: pass")
    limits = _cell(page, 1).locator("details.limits")
    limits.locator("summary").click()
    limits.locator("input[name=wall_timeout_s]").fill("2")
    limits.locator("input[name=wall_timeout_s]").dispatch_event("change")
    page.click("#add-code")
    _type_code(page, _cell(page, 2), "print('never')")
    page.click("#run-all")
    expect(page.locator("#message")).to_have_text(
        "Run all stopped at cell 2: timed out (stopped after the 2 s wall-clock limit)", timeout=RUN_S
    )
    _expect_outcome(_cell(page, 0), "succeeded")
    expect(_cell(page, 1).locator(".reason")).to_have_text("stopped after the 2 s wall-clock limit")
    expect(_cell(page, 2).locator(".run-view")).to_be_hidden()
    page.screenshot(path=shots / "notebook-run-all-1280.png", full_page=True)

    page.goto(f"{site}/runs/")
    expect(page.locator("table")).to_contain_text("timed out")
    page.locator("table a").first.click()
    expect(page.locator("#run-view")).to_have_attribute("data-outcome", "timed_out", timeout=30_000)
    expect(page.locator("#chart canvas, #chart")).not_to_have_count(0)
    page.set_viewport_size({"width": 800, "height": 900})
    page.screenshot(path=shots / "run-detail-800.png", full_page=True)


def test_scripts_and_notebooks_open_by_upload_and_drop_broken_inputs_are_fixed_and_conflicts_are_shown(
    chromium: Browser, site: str, shots: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    home = page.url
    script = tmp_path / "helper.py"
    script.write_text("print('from a script')\n")
    page.set_input_files("#import-file", str(script))
    expect(page).not_to_have_url(home)
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    expect(page.locator("#notebook-name")).to_have_value("helper")
    expect(page.locator("section.cell")).to_have_count(1)
    expect(_cell(page, 0).locator("select.cell-type")).to_have_value("python")
    expect(_cell(page, 0).locator(".cm-content")).to_have_text("print('from a script')")
    _cell(page, 0).get_by_role("button", name="run this cell").click()
    _expect_outcome(_cell(page, 0), "succeeded")
    expect(_cell(page, 0).locator("pre.stdout")).to_have_text("from a script\n")

    # A .js file dropped on the page.
    before = page.url
    dropped = page.evaluate_handle(
        "() => { const t = new DataTransfer();"
        " t.items.add(new File([\"console.log('dropped')\"], 'dropped.js', {type: 'text/javascript'})); return t; }"
    )
    for kind in ("dragenter", "dragover", "drop"):
        page.dispatch_event("#cells", kind, {"dataTransfer": dropped})
    expect(page).not_to_have_url(before)
    expect(page.locator("#notebook-name")).to_have_value("dropped")
    expect(_cell(page, 0).locator("select.cell-type")).to_have_value("node")

    # A .ipynb: its markdown and code cells.
    notebook = tmp_path / "study.ipynb"
    notebook.write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"id": "intro", "cell_type": "markdown", "metadata": {}, "source": ["## A study"]},
                  {"id": "sum", "cell_type": "code", "metadata": {}, "source": ["print(6 * 7)"], "outputs": [],
                   "execution_count": None}],
    }))  # fmt: skip
    page.set_input_files("#import-file", str(notebook))
    expect(page.locator("#notebook-name")).to_have_value("study")
    expect(_cell(page, 0).locator(".markdown-view h2")).to_have_text("A study")
    expect(_cell(page, 1).locator(".cm-content")).to_have_text("print(6 * 7)")
    _a_deleted_input_is_fixed_and_a_conflict_is_shown(chromium, page, shots, site, tmp_path)


def _a_deleted_input_is_fixed_and_a_conflict_is_shown(
    browser: Any, page: Any, shots_dir: Any, base: Any, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    # An input whose dataset was deleted and uploaded again: shown as deleted, fixed in one click.
    study = page.url
    csv = tmp_path / "people.csv"
    csv.write_text(PEOPLE)
    page.goto(f"{base}/datasets/")
    page.set_input_files("#file", str(csv))
    expect(page.locator("#dataset-list")).to_contain_text("people.csv")
    page.goto(study)
    reader = _cell(page, 1)
    _type_code(page, reader, "print(open('/input/people.csv').read().count('\\n'))")
    reader.get_by_label("add a dataset as input").select_option(label="people.csv")
    _expect_saved(page)
    page.goto(f"{base}/datasets/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="delete people.csv").click()
    expect(page.locator("#dataset-list")).not_to_contain_text("people.csv")
    page.set_input_files("#file", str(csv))
    expect(page.locator("#dataset-list")).to_contain_text("people.csv")
    page.goto(study)
    reader = _cell(page, 1)
    expect(reader.locator(".chip.broken")).to_contain_text("people.csv")
    page.screenshot(path=shots_dir / "notebook-broken-input-1280.png", full_page=True)
    reader.get_by_role("button", name="use current people.csv").click()
    expect(reader.locator(".chip.broken")).to_have_count(0)
    reader.get_by_role("button", name="run this cell").click()
    _expect_outcome(reader, "succeeded")
    expect(reader.locator("pre.stdout")).to_have_text("4\n")

    # The same notebook changed in another tab: this one says so and offers a reload.
    other = browser.page(page.context, label="other tab")
    other.goto(study)
    expect(other.locator("#notebook")).to_have_attribute("data-ready", "true")
    _type_code(page, _cell(page, 1), "print('from the first tab')")
    _expect_saved(page)
    _type_code(other, _cell(other, 1), "print('from the other tab')")
    conflict = other.locator("#conflict")
    expect(conflict).to_contain_text("changed elsewhere", timeout=10_000)
    expect(other.locator("#save-status")).to_have_text("not saved (conflict)")
    other.screenshot(path=shots_dir / "notebook-conflict-1280.png")
    other.get_by_role("button", name=re.compile("^Reload")).click()
    expect(_cell(other, 1).locator(".cm-content")).to_have_text("print('from the first tab')")
    browser.errors = [e for e in browser.errors if not (e[0] == "other tab" and "status of 409" in e[1])]

    page.goto(f"{base}/api/docs")
    expect(page.locator(".opblock-tag", has_text="notebooks")).to_be_visible(timeout=15_000)
    expect(page.locator('.opblock-summary-path[data-path="/api/notebooks/{notebook_id}"]').first).to_be_visible()
    page.screenshot(path=shots_dir / "api-docs-1280.png")


def test_images_written_or_drawn_by_a_cell_show_under_it(chromium: Browser, shots: Path) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    writer = _cell(page, 0)
    _type_code(page, writer, WRITES_IMAGES)
    writer.get_by_role("button", name="run this cell").click()
    _expect_outcome(writer, "succeeded")
    for name in ("dot.png", "ring.svg"):
        _expect_image_shown(page, writer, name)
    assert page.evaluate("window.pwned") is None  # an SVG's script never runs on the site's origin
    page.screenshot(path=shots / "notebook-images-1280.png", full_page=True)

    page.click("#add-code")
    plot = _cell(page, 1)
    _type_code(page, plot, PLOT)
    plot.get_by_role("button", name="run this cell").click()
    _expect_outcome(plot, "succeeded")
    figure = plot.locator("img.display-image")  # the inline backend's figure, as Jupyter shows it
    expect(figure).to_have_count(1)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=figure.element_handle())
    expect(plot.locator("img.output-image")).to_have_count(0)  # not also saved as a file at exit
    page.screenshot(path=shots / "notebook-plot-1280.png", full_page=True)


def _expect_image_shown(page: Any, cell: Any, name: str) -> None:
    from playwright.sync_api import expect

    image = cell.locator(f"img.output-image[alt='{name}']")
    expect(image).to_be_visible()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())


def test_a_failed_runs_stderr_shows_its_end_with_the_whole_a_click_away(chromium: Browser, shots: Path) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    cell = _cell(page, 0)
    code = "import sys\nfor i in range(300):\n    print('noise', i, file=sys.stderr)\nraise ValueError('the point')"
    _type_code(page, cell, code)
    cell.get_by_role("button", name="run this cell").click()
    _expect_outcome(cell, "failed")
    stderr = cell.locator("pre.stderr")
    expect(stderr).to_contain_text("ValueError: the point")
    at_end = "(pane) => pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 2"
    assert stderr.evaluate(at_end), "the pane shows the top of the traceback, not its end"
    expect(stderr.get_by_text("ValueError: the point")).to_be_in_viewport()
    whole = cell.get_by_role("button", name="Show all of stderr")
    whole.click()
    assert stderr.evaluate("(pane) => pane.scrollHeight <= pane.clientHeight + 2"), "the whole of stderr is shown"
    expect(cell.get_by_role("button", name="Show the end of stderr")).to_have_attribute("aria-expanded", "true")
    page.screenshot(path=shots / "stderr-whole-1280.png", full_page=True)


def test_an_upload_of_a_name_taken_offers_to_replace_that_dataset(chromium: Browser, site: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    page.goto(f"{site}/datasets/")
    first, second = tmp_path / "one", tmp_path / "two"
    for folder, text in ((first, "name\nada\n"), (second, "name\ngrace\n")):
        folder.mkdir()
        (folder / "people.csv").write_text(text)
    page.set_input_files("#file", str(first / "people.csv"))
    expect(page.locator("#upload-status")).to_have_text("uploaded people.csv")
    page.set_input_files("#file", str(second / "people.csv"))
    expect(page.locator("#upload-status")).to_contain_text("You already have people.csv.")
    page.get_by_role("button", name="Replace people.csv").click()
    expect(page.locator("#upload-status")).to_have_text("replaced people.csv")
    expect(page.locator("#dataset-list tr")).to_have_count(1)
    page.get_by_role("button", name="preview people.csv").click()
    expect(page.locator("#preview")).to_contain_text("grace")
    # The refusal the page answered with its offer is the one console error expected.
    assert [e for e in chromium.errors if "status of 409" in e[1]], chromium.errors
    chromium.errors = [e for e in chromium.errors if "status of 409" not in e[1]]


def test_the_editor_indents_with_tab_four_spaces_in_python_two_in_javascript(chromium: Browser) -> None:
    page = chromium.logged_in()

    def typed(cell: Any, keys: list[str]) -> str:
        cell.locator(".cm-content").click()
        page.keyboard.press("Control+A")
        page.keyboard.press("Delete")
        for key in keys:
            page.keyboard.press(key) if key in ("Enter", "Tab", "Shift+Tab", "Home") else page.keyboard.type(key)
        lines = cell.locator(".cm-content .cm-line").all_text_contents()
        return "\n".join(line.replace("\u00a0", " ") for line in lines)

    cell = _cell(page, 0)
    assert typed(cell, ["if True:", "Enter", "x = 1"]) == "if True:\n    x = 1"  # Python: four spaces
    assert typed(cell, ["x = 1", "Home", "Tab"]) == "    x = 1"  # Tab indents, in the editor
    assert typed(cell, ["    x = 1", "Shift+Tab"]) == "x = 1"  # Shift-Tab dedents
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")  # Esc then Tab: focus leaves the editor
    assert page.evaluate("document.activeElement.closest('.cm-editor') === null")
    cell.locator("select.cell-type").select_option("node")
    assert typed(cell, ["if (x) {", "Enter", "y();"]).startswith("if (x) {\n  y();")  # JavaScript: two


def _cell(page: Any, index: int) -> Any:
    return page.locator("section.cell").nth(index)


def _type_code(page: Any, cell: Any, code: str) -> None:
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)


def _expect_outcome(cell: Any, outcome: str, timeout: int = RUN_S) -> None:
    from playwright.sync_api import expect

    view = cell.locator(".run-view")
    expect(view).to_have_attribute("data-state", "finished", timeout=timeout)
    expect(view).to_have_attribute("data-outcome", outcome, timeout=2_000)  # fails fast, showing the output
    expect(cell.locator(".badge")).to_have_text(Outcome(outcome).words)  # plain words, not the value


def _expect_saved(page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#save-status")).to_have_text("all changes saved", timeout=10_000)
