"""The notebook's keyboard in a real browser, as Jupyter's: Esc leaves the editor for command mode,
whose single keys add, move between, delete (and bring back), retype and run cells, hide an output
and list themselves; a long output scrolls in its box; a new code cell takes the notebook's runtime
(chosen in the toolbar), and a cell of another runtime says so. At a desktop's width and a phone's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.playground.test_browser import (  # noqa: F401 - fixtures
    BROWSER_MARKS,
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

FIRST = "x = 6 * 7\nx"


def _escape(page: Any, cell: Any) -> None:
    """Esc into command mode: a first Esc may only close the editor's completion list (typing
    "x" offers the document's words), as in Jupyter; a second then leaves the editor."""
    for _ in range(2):
        page.keyboard.press("Escape")
        if cell.evaluate("(node) => document.activeElement === node"):
            return
    raise AssertionError("Esc did not leave the editor")


SECOND = "print(x + 1)\nfor i in range(300):\n    print(i)"


def test_command_mode_adds_moves_deletes_with_undo_retypes_runs_and_hides_outputs(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    cells = page.locator("section.cell")
    expect(cells).to_have_count(1)
    _type_code(page, _cell(page, 0), FIRST)

    # Esc: the cell, not its editor, has the focus; b then adds a cell below (no "b" typed anywhere).
    _escape(page, _cell(page, 0))
    expect(_cell(page, 0)).to_be_focused()
    expect(_cell(page, 0)).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("b")
    expect(cells).to_have_count(2)
    expect(_cell(page, 1)).to_be_focused()
    page.keyboard.press("Enter")  # into its editor
    expect(_cell(page, 1).locator(".cm-content")).to_be_focused()
    page.keyboard.insert_text(SECOND)
    _escape(page, _cell(page, 1))
    _expect_saved(page)
    assert page.locator(".cm-content").nth(0).inner_text() == FIRST

    # k selects the cell above; Shift+Enter runs it and selects the next; j and arrows move too.
    page.keyboard.press("k")
    expect(_cell(page, 0)).to_be_focused()
    page.keyboard.press("Shift+Enter")
    expect(_cell(page, 1)).to_be_focused()
    _expect_outcome(_cell(page, 0), "succeeded")
    expect(_cell(page, 0).locator(".displays pre")).to_have_text("42")
    page.keyboard.press("Control+Enter")  # runs the selected cell in place
    _expect_outcome(_cell(page, 1), "succeeded")
    output = _cell(page, 1).locator("pre.stdout")
    expect(output).to_contain_text(re.compile(r"^43\n0\n1\n"))
    expect(_cell(page, 1)).to_be_focused()
    _outputs_scroll_and_hide(cells, output, page, shots)
    _a_adds_above_m_and_y_change_kind_h_lists_the_keys(cells, chromium, page, shots)


def _outputs_scroll_and_hide(cells: Any, output: Any, page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # A long output scrolls inside its box, not the page.
    assert page.evaluate("(pre) => pre.scrollHeight > pre.clientHeight + 100", output.element_handle())

    # o hides the output (said in its place), o shows it again; so do the cell's own buttons.
    page.keyboard.press("o")
    expect(_cell(page, 1).locator(".run-view")).to_be_hidden()
    expect(_cell(page, 1).locator(".collapsed-note")).to_be_visible()
    expect(_cell(page, 1).get_by_role("button", name="show this cell's output")).to_have_text("Show output")
    page.screenshot(path=shots_dir / "command-mode-hidden-1280.png", full_page=True)
    page.keyboard.press("o")
    expect(output).to_be_visible()
    _cell(page, 1).get_by_role("button", name="hide this cell's output").click()
    expect(_cell(page, 1).locator(".run-view")).to_be_hidden()
    _cell(page, 1).locator(".collapsed-note").click()
    expect(output).to_be_visible()

    # d d deletes the selected cell without asking; z brings it back, with its run; a reload shows
    # the server gave it that run again.
    _cell(page, 1).focus()
    page.keyboard.press("d")
    page.keyboard.press("d")
    expect(cells).to_have_count(1)
    expect(page.locator("#message")).to_contain_text("cell 2 deleted")
    _expect_saved(page)
    page.keyboard.press("z")
    expect(cells).to_have_count(2)
    expect(page.locator("#message")).to_have_text("cell 2 is back")
    expect(_cell(page, 1).locator("pre.stdout")).to_contain_text(re.compile(r"^43\n"))
    _expect_saved(page)
    page.reload()
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    expect(_cell(page, 1).locator("pre.stdout")).to_contain_text(re.compile(r"^43\n"))
    expect(_cell(page, 1).locator(".cm-content")).to_have_text(re.compile(r"^print\(x \+ 1\)"))


def _a_adds_above_m_and_y_change_kind_h_lists_the_keys(cells: Any, browser: Any, page: Any, shots_dir: Any) -> None:
    from playwright.sync_api import expect

    # a adds above; m makes it markdown, y code again; the Undo in the message works as z does.
    _cell(page, 0).focus()
    page.keyboard.press("a")
    expect(cells).to_have_count(3)
    expect(_cell(page, 0)).to_be_focused()
    expect(_cell(page, 1).locator(".cm-content")).to_have_text(FIRST.replace("\n", ""))
    page.keyboard.press("m")
    expect(_cell(page, 0)).to_have_attribute("data-kind", "markdown")
    expect(_cell(page, 0)).to_be_focused()
    page.keyboard.press("y")
    expect(_cell(page, 0)).to_have_attribute("data-kind", "code")
    page.keyboard.press("ArrowDown")
    expect(_cell(page, 1)).to_be_focused()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("d")
    page.keyboard.press("d")
    expect(cells).to_have_count(2)
    page.locator("#message").get_by_role("button", name="Undo").click()
    expect(cells).to_have_count(3)
    for index, text in ((1, FIRST), (2, SECOND)):  # nothing typed by a command key
        assert page.locator(".cm-content").nth(index).inner_text() == text

    # h lists the keys.
    _cell(page, 2).focus()
    page.keyboard.press("h")
    keys = page.locator("#keys")
    expect(keys).to_have_attribute("open", "")
    expect(keys.locator("#keys-list")).to_contain_text("undo the last deletion")
    page.screenshot(path=shots_dir / "command-mode-1280.png", full_page=True)
    expect_fits_a_phone(page, shots_dir / "command-mode-390.png")
    assert not browser.errors, browser.errors


def test_a_new_code_cell_takes_the_notebooks_runtime_and_a_cell_of_another_says_so(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    chooser = page.get_by_label("runtime of new code cells")
    expect(chooser).to_have_value("python")
    badge = _cell(page, 0).locator(".runtime-badge")
    expect(badge).to_be_hidden()

    chooser.select_option("node")
    expect(badge).to_have_text("Python cell")  # the starter cell keeps its own runtime, and says it
    page.click("#add-code")
    expect(_cell(page, 1).locator("select.cell-type")).to_have_value("node")
    expect(_cell(page, 1).locator(".runtime-badge")).to_be_hidden()
    _type_code(page, _cell(page, 1), "console.log(6 * 7)")
    _escape(page, _cell(page, 1))
    page.keyboard.press("b")  # command mode's new cell too: the notebook's runtime, not the cell above's
    expect(_cell(page, 2).locator("select.cell-type")).to_have_value("node")
    _cell(page, 1).focus()
    page.keyboard.press("Shift+Enter")
    _expect_outcome(_cell(page, 1), "succeeded", timeout=RUN_S)
    expect(_cell(page, 1).locator("pre.stdout")).to_have_text("42\n")
    _expect_saved(page)

    page.reload()
    expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    expect(page.get_by_label("runtime of new code cells")).to_have_value("node")
    expect(_cell(page, 0).locator(".runtime-badge")).to_have_text("Python cell")
    page.screenshot(path=shots / "notebook-runtime-1280.png", full_page=True)
    expect_fits_a_phone(page, shots / "notebook-runtime-390.png")
    assert not chromium.errors, chromium.errors
