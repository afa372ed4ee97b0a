"""Notebook sessions in a real browser: each cell's displays (a data frame as Cordon's paged,
sortable table), what it leaves for the cell below and what did not carry, where each cell starts
from, stale marks after an edit and a Restart, the notebook's own inputs and its variables, IPython's
marks (execution counts, a failed line, coloured help and tracebacks); at a 1280 px desktop's width
and a 390 px phone's, which never scrolls sideways."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from playground.displays import TABLE, clean_manifest
from playground.models import Notebook, Run, RunCell, RunKind, RunState
from playground.services import datasets as dataset_services
from playground.services import notebooks as notebook_services
from tests.playground.factories import stored_logs
from tests.playground.test_browser import (  # noqa: F401 - fixtures
    BROWSER_MARKS,
    PASSWORD,
    RUN_S,
    Browser,
    _cell,
    _expect_outcome,
    _expect_saved,
    _type_code,
    chromium,
    expect_fits_a_phone,
    shots,
    site,
)

pytestmark = BROWSER_MARKS

SALES = "region,units\nnorth,3\nsouth,5\neast,7\n"
CELLS = [
    "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')",
    "n = len(df)",
    "print(n + 1)",
    "df.describe()",
    "6 * 7",
    "fh = open('/etc/hostname')",
]
RESTART_WORDS = "Restart: every cell starts from nothing until the cells above run again. Outputs stay."


def test_a_notebook_runs_top_to_bottom_with_state_displays_variables_stale_marks_and_restart(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    csv = tmp_path / "sales.csv"
    csv.write_text(SALES)
    notebook_url = page.url
    page.goto(f"{site}/datasets/")
    page.set_input_files("#file", str(csv))
    expect(page.locator("#dataset-list")).to_contain_text("sales.csv")

    # The dataset is the notebook's, not a cell's: every cell sees it under /input.
    page.goto(notebook_url)
    page.get_by_label("add a dataset to the notebook's inputs").select_option(label="sales.csv")
    expect(page.locator("#notebook-inputs .chip")).to_have_text(re.compile("sales.csv"))
    for index, code in enumerate(CELLS):
        if index:
            page.click("#add-code")
        _type_code(page, _cell(page, index), code)
    _expect_saved(page)
    expect(_cell(page, 0).locator(".inputs .chip")).to_have_count(0)  # no input of its own

    page.click("#run-all")
    expect(page.locator("#message")).to_have_text("Run all: 6 code cells succeeded", timeout=RUN_S * len(CELLS))
    for index in range(len(CELLS)):
        _expect_outcome(_cell(page, index), "succeeded")
    expect(_cell(page, 2).locator("pre.stdout")).to_have_text("4\n")  # n from cell 2, df from cell 1
    expect(_cell(page, 2).locator(".chain")).to_contain_text(re.compile(r"starts from cell 2's run at \S"))
    expect(_cell(page, 0).locator(".chain")).to_have_text("starts from nothing")
    expect(_cell(page, 0).locator(".cell-state")).to_contain_text(
        re.compile(r"State for the next cell: \S+ \S+, \d+ names?")
    )

    # df.describe() is Cordon's own table, sortable; never the library's HTML.
    described = _cell(page, 3).locator(".displays")
    table = described.locator("table")
    expect(table.locator("caption")).to_have_text("8 rows")
    expect(described.locator(".display-html")).to_have_count(0)
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text("count")
    table.get_by_role("button", name="sort by units").click()
    expect(table.locator("th").nth(1)).to_have_attribute("aria-sort", "ascending")
    expect(_cell(page, 4).locator(".displays pre")).to_have_text("42")
    handle = _cell(page, 5).locator(".cell-state")
    expect(handle).to_contain_text("not carried to the next cell: fh (open file)")
    _the_variables_and_stale_marks(page, shots)
    _restart_then_run_from_here(page, shots)


def _the_variables_and_stale_marks(page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # The variables: what a new cell at the end would start with; a frame opens as a table.
    panel = page.locator("#variables")
    panel.locator("summary").click()
    for name in ("df", "n"):
        expect(panel.locator(f"tr[data-name={name}] td.variable-name code")).to_have_text(name)
    expect(panel.locator("tr[data-name=fh]")).to_have_count(0)
    expect(panel).to_contain_text("not carried: fh (open file)")
    panel.get_by_role("button", name="show df as a table").click()
    expect(panel.locator("tr.variable-table table caption")).to_have_text("3 rows")
    for cell in range(len(CELLS)):
        expect(_cell(page, cell)).not_to_have_class(re.compile(r"\bstale\b"))
    page.screenshot(path=shots_dir / "sessions-ran-1280.png", full_page=True)
    expect_fits_a_phone(page, shots_dir / "sessions-ran-390.png")

    # An edit to cell 1, once saved, makes every cell below it stale, said in words.
    _type_code(page, _cell(page, 0), CELLS[0] + "\n# the regions")
    _expect_saved(page)
    expect(_cell(page, 0).locator(".stale-badge")).to_be_visible()
    for index in range(1, len(CELLS)):
        expect(_cell(page, index)).to_have_class(re.compile(r"\bstale\b"))
        expect(_cell(page, index).locator(".stale-badge")).to_have_text("stale")
    expect(_cell(page, 1).locator(".chain")).to_contain_text("stale: cell 1, whose state it started from, is stale")


def _restart_then_run_from_here(page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # Restart: asked first; then nothing passes down, so every cell is stale and starts from nothing.
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    page.get_by_role("button", name="Restart (clear state)").click()
    expect(page.locator("#message")).to_contain_text("Restarted")
    assert asked == [RESTART_WORDS]
    for index in range(len(CELLS)):
        expect(_cell(page, index)).to_have_class(re.compile(r"\bstale\b"))
        expect(_cell(page, index).locator(".chain")).to_contain_text("starts from nothing")
    expect(page.locator("#variables-body")).to_have_text("No variables yet: run a cell.")
    page.screenshot(path=shots_dir / "sessions-restarted-1280.png", full_page=True)

    page.click("#run-all")
    expect(page.locator("#message")).to_have_text("Run all: 6 code cells succeeded", timeout=RUN_S * len(CELLS))
    for index in range(len(CELLS)):
        expect(_cell(page, index)).not_to_have_class(re.compile(r"\bstale\b"))
    expect(_cell(page, 2).locator("pre.stdout")).to_have_text("4\n")

    # Run from here: this cell and the ones below, in order.
    _cell(page, 4).get_by_role("button", name="run from here").click()
    expect(page.locator("#message")).to_have_text("Run from cell 5: 2 code cells succeeded", timeout=RUN_S * 2)


# --- a finished notebook, made by hand: no sandbox needed ----------------------------------------

STATE_FILE = "states/made-by-hand"  # never read: the page only needs to know a state was kept
ERROR = b"ZeroDivisionError: division by zero\n"
IMPORTED = [
    {"mime": "text/plain", "text": "old\n", "plain": "", "stream": "stdout"},
    {"mime": "text/html", "text": "<i>from Jupyter</i>", "plain": "<HTML>"},
]


@pytest.fixture
def finished_notebook(site: str) -> str:  # noqa: F811
    """A notebook whose cells all ran (made before the browser starts: Playwright's sync API runs an
    event loop in this thread): a load, a describe, a frame longer than a page, rich displays, a
    handle that did not carry and a failed cell last."""
    owner = User.objects.create_user("bo", password=PASSWORD)
    upload = SimpleUploadedFile("sales.csv", SALES.encode())
    dataset = dataset_services.dataset_create(user=owner, upload=upload)
    frame = _frame(rows=500, total_rows=1200)
    frame_variable = {"name": "df", "type": "DataFrame", "module": "pandas.core.frame", "shape": [1200, 3],
                      "bytes": 3_400_000, "table": _frame(rows=30, total_rows=1200)}  # fmt: skip
    cells = [
        ("load", "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')", [], [frame_variable], []),
        ("count", "n = len(df)", [], [frame_variable, _number("n")], []),
        ("describe", "df.describe()", [{"data": {TABLE: _frame(rows=8, total_rows=8), "text/plain": "..."}}], [], []),
        ("frame", "df", [{"data": {TABLE: frame, "text/plain": "..."}}], [], []),
        ("rich", "display(HTML('<b>bold</b>'))\n6 * 7", [
            {"data": {"text/html": "<b>bold</b><script>window.pwned = 1</script>", "text/plain": "<HTML>"}},
            {"data": {"text/markdown": "*marked* [x](javascript:window.pwned=2)", "text/plain": "<Markdown>"}},
            {"data": {"text/plain": "42"}},
        ], [], []),
        ("handle", "fh = open('/etc/hostname')", [], [frame_variable, _number("n")],
         [{"name": "fh", "type": "TextIOWrapper", "why": "open file"}]),
        ("boom", "1 / 0", [], [], []),
    ]  # fmt: skip
    notebook = notebook_services.notebook_create(
        user=owner, name="Sales by hand",
        cells=[{"id": cell_id, "kind": "code", "runtime": "python", "source": code, "inputs": [], "limits": {}}
               for cell_id, code, *_ in cells],
    )  # fmt: skip
    gone = {"kind": "dataset", "id": str(uuid.uuid4()), "name": "old.csv"}  # deleted since: shown as broken
    notebook.inputs = [{"kind": "dataset", "id": str(dataset.id), "name": "sales.csv"}, gone]
    above: Run | None = None
    now = timezone.now()
    for index, (cell_id, code, displays, variables, not_carried) in enumerate(cells):
        failed = cell_id == "boom"
        run = Run.objects.create(
            owner=owner, kind=RunKind.RUN, runtime="python", code=code, state=RunState.FINISHED,
            outcome="failed" if failed else "succeeded", exit_code=1 if failed else 0,
            reason="exit status 1" if failed else "", finished_at=now - timedelta(minutes=10 - index),
            stdout_bytes=0, stderr_bytes=len(ERROR) if failed else 0,
        )  # fmt: skip
        if failed:
            stored_logs(run.id, stderr=ERROR)
        manifest = {
            "displays": displays,
            "variables": variables,
            "not_carried": not_carried,
            "modules": {"pd": "pandas"},
        }
        cleaned = clean_manifest(text=json.dumps(manifest))
        RunCell.objects.create(
            run=run, notebook=notebook, cell_id=cell_id, state_from=above, manifest=cleaned["manifest"],
            displays=cleaned["displays"], state_file="" if failed else STATE_FILE,
            state_bytes=None if failed else 3_500_000 + index,
        )  # fmt: skip
        notebook.cells[index]["last_run_id"] = str(run.id)
        above = above if failed else run
    # An imported notebook's outputs for a cell that has not run here (services.notebooks keeps them).
    notebook.cells.append({"id": "imported", "kind": "code", "runtime": "python", "source": "print('old')",
                           "inputs": [], "limits": {}, "last_run_id": None, "imported": IMPORTED})  # fmt: skip
    Notebook.objects.filter(id=notebook.id).update(cells=notebook.cells, cell_count=len(notebook.cells),
                                                   inputs=notebook.inputs)  # fmt: skip
    return f"{site}/notebooks/{notebook.id}/"


def _frame(*, rows: int, total_rows: int) -> dict[str, Any]:
    regions = ["north", "south", "east", "west"]
    return {"columns": ["region", "units", "price"], "dtypes": ["object", "int64", "float64"],
            "index": list(range(rows)), "rows": [[regions[i % 4], (i * 7) % 50, i / 4] for i in range(rows)],
            "total_rows": total_rows, "total_columns": 3}  # fmt: skip


def _number(name: str) -> dict[str, Any]:
    return {"name": name, "type": "int", "module": "builtins", "bytes": 28}


def test_a_finished_notebook_shows_displays_state_and_chain_and_fits_a_phone(
    finished_notebook: str,
    chromium: Browser,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in("bo")
    page.goto(finished_notebook)
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    chips = page.locator("#notebook-inputs .chip")
    expect(chips).to_have_text([re.compile("sales.csv"), re.compile(r"old\.csv \(deleted\)")])
    for index in range(7):
        expect(_cell(page, index).locator(".run-view")).to_have_attribute("data-state", "finished")

    load, count, describe, frame, rich, handle, boom, imported = (_cell(page, index) for index in range(8))
    expect(load.locator(".chain")).to_have_text("starts from nothing")
    expect(count.locator(".chain")).to_contain_text(re.compile(r"^starts from cell 1's run at \S"))
    expect(count.locator(".cell-state")).to_contain_text(re.compile(r"^State for the next cell: 3\.3 MiB, 3 names"))
    expect(describe.locator(".displays caption")).to_have_text("8 rows")

    # A frame longer than a page: 20 rows a page, sorting over every row the page has.
    paged = frame.locator(".displays")
    expect(paged.locator("caption")).to_have_text(f"{_rows(1, 20)} of 500 shown (of 1200 in the frame)")
    expect(paged.locator("tbody tr")).to_have_count(20)
    expect(paged.get_by_role("button", name="Previous")).to_be_disabled()
    paged.get_by_role("button", name="Next").click()
    expect(paged.locator("caption")).to_have_text(f"{_rows(21, 40)} of 500 shown (of 1200 in the frame)")
    expect(paged.locator("tbody tr").first.locator("td").first).to_have_text("20")
    paged.get_by_role("button", name="sort by units").click()
    expect(paged.locator("caption")).to_have_text(
        f"{_rows(1, 20)} of 500 shown (of 1200 in the frame); sorted: these 500 rows only, not the whole frame"
    )
    expect(paged.locator("tbody tr").first.locator("td").nth(2)).to_have_text("0")

    # HTML and markdown as the server sanitised them, parsed inert: nothing runs.
    expect(rich.locator(".display-html b")).to_have_text("bold")
    expect(rich.locator(".display-markdown em")).to_have_text("marked")
    rich.locator(".display-markdown").get_by_text("x", exact=True).click()
    assert page.evaluate("window.pwned") is None
    expect(rich.locator("pre.display-text")).to_have_text("42")
    expect(handle.locator(".cell-state")).to_contain_text("not carried to the next cell: fh (open file)")
    expect(imported.locator(".imported")).to_contain_text("Outputs from the imported notebook")
    expect(imported.locator(".imported pre.stdout")).to_have_text("old\n")
    expect(imported.locator(".imported .display-html i")).to_have_text("from Jupyter")
    expect(imported.locator(".chain")).to_contain_text("starts from cell 6's run")
    expect(boom.locator(".cell-state")).to_have_text(
        "no state kept: the next cell starts from the state before this one"
    )

    panel = page.locator("#variables")
    expect(panel.locator("summary")).to_have_text("Variables (2)")
    panel.locator("summary").click()
    expect(panel).to_contain_text("from cell 6's run")
    panel.get_by_role("button", name="show df as a table").click()
    opened = panel.locator("tr.variable-table")
    expect(opened.locator("caption")).to_have_text(f"{_rows(1, 20)} of 30 shown (of 1200 in the frame)")
    expect(opened).to_be_visible()
    page.screenshot(path=shots / "sessions-by-hand-1280.png", full_page=True)
    expect_fits_a_phone(page, shots / "sessions-by-hand-390.png")

    page.get_by_role("button", name="remove input old.csv").click()
    _expect_saved(page)
    expect(chips).to_have_count(1)

    # Moving a cell and saving re-reads the chain: the cell below the moved one is stale now.
    rich.get_by_role("button", name="move this cell up").click()
    _expect_saved(page)
    expect(_cell(page, 5)).to_have_class(re.compile(r"\bstale\b"))
    expect(_cell(page, 5).locator(".stale-badge")).to_have_attribute("title", re.compile("ran since"))
    expect(_cell(page, 5).locator(".chain")).to_contain_text("stale: cell 5 ran since")
    page.screenshot(path=shots / "sessions-by-hand-stale-1280.png", full_page=True)
    expect(opened).to_be_visible()  # the notebook read again: a frame the user opened stays open


def _rows(first: int, last: int) -> str:
    return f"rows {first}\N{EN DASH}{last}"


def test_an_exported_notebook_imports_back_with_its_figure_and_its_traceback(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    _type_code(page, _cell(page, 0), "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nprint('drawn')")
    page.click("#add-code")
    _type_code(page, _cell(page, 1), "ratio = 1 / 0")
    _expect_saved(page)
    page.click("#run-all")
    expect(page.locator("#message")).to_contain_text("Run all stopped at cell 2", timeout=RUN_S * 2)
    expect(_cell(page, 0).locator("img.display-image")).to_have_count(1)  # shown inline, as a kernel shows it

    with page.expect_download() as download:
        page.click("#export-notebook")
    exported = tmp_path / "round.ipynb"
    download.value.save_as(exported)
    page.set_input_files("#import-file", str(exported))
    expect(page.locator("#notebook-name")).to_have_value("round")
    plot, boom = _cell(page, 0).locator(".imported"), _cell(page, 1).locator(".imported")
    expect(plot).to_contain_text("Outputs from the imported notebook")
    expect(plot).to_contain_text("drawn")
    figure = plot.locator("img")
    expect(figure).to_have_count(1)
    assert figure.evaluate("img => img.complete && img.naturalWidth > 0")  # served, and a real PNG
    expect(boom).to_contain_text("ZeroDivisionError: division by zero")
    page.screenshot(path=shots / "sessions-imported-1280.png", full_page=True)


# --- IPython's cells: a figure, a failed line whose names carry, coloured help, execution counts ----

IPYTHON_CELLS = [
    "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nx = 5",
    "y = x + 1\nraise ValueError('no')\nz = 1",
    "print(y)",
    "len?",
]
NO_ESCAPES = "() => !document.documentElement.textContent.includes('\\x1b')"


def test_ipython_cells_show_a_figure_the_failed_line_what_it_kept_coloured_help_and_their_counts(
    chromium: Browser,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    for index, code in enumerate(IPYTHON_CELLS):
        if index:
            page.click("#add-code")
        _type_code(page, _cell(page, index), code)
    _expect_saved(page)
    plot, boom, printed, helped = (_cell(page, index) for index in range(len(IPYTHON_CELLS)))
    expect(plot.locator(".execution-count")).to_have_text("")  # before it ran

    # Run all stops at the failed cell; the cells below it run from what it defined before its error.
    page.click("#run-all")
    expect(page.locator("#message")).to_contain_text("Run all stopped at cell 2", timeout=RUN_S * 2)
    printed.get_by_role("button", name="run from here").click()
    expect(page.locator("#message")).to_have_text("Run from cell 3: 2 code cells succeeded", timeout=RUN_S * 2)
    for cell, outcome in ((plot, "succeeded"), (boom, "failed"), (printed, "succeeded"), (helped, "succeeded")):
        _expect_outcome(cell, outcome)

    # One figure, shown inline under the cell that drew it, and only there.
    figure = plot.locator("img")
    expect(figure).to_have_count(1)
    expect(figure).to_have_class(re.compile(r"\bdisplay-image\b"))
    assert figure.evaluate("img => img.complete && img.naturalWidth > 0")
    for cell in (boom, printed, helped):
        expect(cell.locator("img")).to_have_count(0)

    # The failed cell: where it failed, what it kept, its line marked in its editor and its
    # traceback in colour; the cell below prints what it kept.
    expect(boom.locator(".cell-state")).to_contain_text(
        re.compile(r"^Failed at line 2; what it defined before that carries to the next cell: \S+ \S+, \d+ names?")
    )
    marked = boom.locator(".cm-line.cm-error-line")
    expect(marked).to_have_count(1)
    expect(boom.locator(".cm-line").nth(1)).to_have_class(re.compile(r"\bcm-error-line\b"))
    expect(marked).to_have_text("raise ValueError('no')")
    expect(marked).to_have_attribute("title", "line 2 failed: ValueError: no")
    expect(boom.locator(".cm-lineNumbers .cm-error-gutter")).to_have_text("2")
    stderr = boom.locator("pre.stderr")
    expect(stderr).to_contain_text("ValueError: no")
    expect(stderr.locator("span.ansi-1").first).to_be_visible()
    expect(printed.locator("pre.stdout")).to_have_text("6\n")
    _help_and_the_failed_lines_mark_after_a_reload(helped, page, shots)


def _help_and_the_failed_lines_mark_after_a_reload(helped: Any, page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # `len?`: IPython's help, a display in colour.
    help_text = helped.locator(".displays pre.display-text")
    expect(help_text).to_contain_text("Return the number of items in a container.")
    expect(help_text.locator("span.ansi-1").first).to_be_visible()
    assert page.evaluate(NO_ESCAPES), "an escape code is shown as text"
    counts = page.locator(".execution-count")
    expect(counts.nth(0)).to_have_text("In [1]")
    expect(counts.nth(1)).to_have_text("In [2]")
    expect(counts.nth(2)).to_have_text("In [3]")
    expect(counts.nth(3)).to_have_text("In [4]")  # `len?` is a cell of the count too
    page.screenshot(path=shots_dir / "sessions-ipython-1280.png", full_page=True)
    expect_fits_a_phone(page, shots_dir / "sessions-ipython-390.png")

    # Read again, the page shows the same marks; an edit takes the line's mark away, for good.
    page.reload()
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    boom = _cell(page, 1)
    _expect_outcome(boom, "failed")
    expect(boom.locator(".cm-line.cm-error-line")).to_have_text("raise ValueError('no')")
    expect(page.locator(".execution-count").nth(1)).to_have_text("In [2]")
    assert page.evaluate(NO_ESCAPES), "an escape code is shown as text"
    _type_code(page, boom, IPYTHON_CELLS[1].replace("raise ValueError('no')", "pass"))
    expect(boom.locator(".cm-error-line")).to_have_count(0)
    expect(boom.locator(".cm-error-gutter")).to_have_count(0)
    _expect_saved(page)
    page.reload()
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    _expect_outcome(_cell(page, 1), "failed")
    expect(_cell(page, 1).locator(".cm-error-line")).to_have_count(0)  # its run's code is not this code

    # Run again, it succeeds: no mark, and the count goes on from the state it started from.
    _cell(page, 1).get_by_role("button", name="run this cell").click()
    _expect_outcome(_cell(page, 1), "succeeded")
    expect(_cell(page, 1).locator(".cm-error-line")).to_have_count(0)
    expect(page.locator(".execution-count").nth(1)).to_have_text("In [2]")

    # Whatever the cells above left came back: nothing failed to restore, nothing said so on stderr.
    for index in (1, 2, 3):
        expect(_cell(page, index).locator(".cell-state")).not_to_contain_text("could not be restored")
    expect(_cell(page, 2).locator("pre.stderr")).to_have_text("")


def test_a_cell_whose_displays_cost_more_than_its_budget_says_how_many_were_not_shown_and_why(
    chromium: Browser,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    """The tester's cell: it writes its own display list of deeply nested HTML (the cell program's is
    never written: the cell exits first). What was made safe within the cell's budget is shown; the
    cell says how many were not, and why."""
    from playwright.sync_api import expect

    from tests.bench.bench_fairness import DISPLAYS

    page = chromium.logged_in()
    cell = _cell(page, 0)
    _type_code(page, cell, DISPLAYS)
    _expect_saved(page)
    cell.get_by_role("button", name=re.compile("^run")).first.click()
    _expect_outcome(cell, "succeeded")
    expect(cell.locator(".cell-state")).to_contain_text(re.compile(
        r"\d+ displays not shown: making them safe to show took more than this cell's budget \(2 s of CPU\)"
    ))  # fmt: skip
    shown = cell.locator(".displays > *")
    assert 0 < shown.count() < 100, shown.count()
    page.screenshot(path=shots / "sessions-displays-budget-1280.png")
