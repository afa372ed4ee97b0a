"""Completion in a real browser, as Jupyter's: after a cell that made a frame ran, `df.` and Tab in
the cell below lists the frame's columns first (from the state that cell starts from, with no run),
its methods with their signatures beside them and a doc line in the info panel; Enter inserts the
match; `(` after a function shows its signature under the editor; Tab where nothing precedes the
cursor still indents. At a desktop's width and a phone's."""

from __future__ import annotations

from pathlib import Path

from tests.playground.test_browser import (  # noqa: F401 - fixtures
    BROWSER_MARKS,
    Browser,
    _cell,
    _expect_outcome,
    _type_code,
    chromium,
    expect_fits_a_phone,
    shots,
    site,
)

pytestmark = BROWSER_MARKS

FRAME = "import pandas as pd\ndf = pd.DataFrame({'price': [3, 4], 'units': [1, 2]})\nprint(len(df))"


def test_df_dot_tab_lists_the_columns_then_methods_and_a_paren_shows_the_signature(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    _type_code(page, _cell(page, 0), FRAME)
    page.keyboard.press("Shift+Enter")  # runs it and makes the next cell
    _expect_outcome(_cell(page, 0), "succeeded")

    below = _cell(page, 1)
    _type_code(page, below, "df.")
    page.keyboard.press("Tab")
    listed = page.locator(".cm-tooltip-autocomplete li")
    expect(listed.first).to_contain_text("price")
    labels = [text.strip() for text in page.locator(".cm-tooltip-autocomplete .cm-completionLabel").all_inner_texts()]
    assert labels[:2] == ["price", "units"], labels
    assert "head" in labels and "groupby" in labels
    head = listed.filter(has_text="head").first
    expect(head.locator(".cm-completionDetail")).to_contain_text("(n")
    page.screenshot(path=shots / "completion-1280.png", full_page=True)

    page.keyboard.type("he")  # narrows the list, as typing does in Jupyter
    expect(listed.first.locator(".cm-completionLabel")).to_have_text("head")
    expect(page.locator(".cm-completionInfo")).to_contain_text("Return the first")
    page.keyboard.press("Enter")
    expect(below.locator(".cm-content")).to_have_text("df.head")

    page.keyboard.type("(")
    call = below.locator(".call-signature")
    expect(call).to_be_visible()
    expect(call).to_contain_text("df.head(n")
    expect(call).to_contain_text("Return the first")
    page.screenshot(path=shots / "completion-call-1280.png", full_page=True)
    page.keyboard.type("3")  # the arguments: the signature stays while the call is open
    expect(call).to_be_visible()
    page.keyboard.type(")")
    expect(call).to_be_hidden()
    page.keyboard.type("\ndf.head(")  # a call on a new line
    expect(call).to_be_visible()

    # Tab at the start of a line indents (test_completion.py holds that completing runs nothing).
    _type_code(page, below, "x = 1")
    expect(call).to_be_hidden()  # a new text, with no call open
    page.keyboard.press("Home")
    page.keyboard.press("Tab")
    expect(below.locator(".cm-content")).to_have_text("    x = 1")
    expect(page.locator(".cm-tooltip-autocomplete")).to_have_count(0)

    _type_code(page, below, "df.u")
    page.keyboard.press("Control+Space")
    expect(listed.first.locator(".cm-completionLabel")).to_have_text("units")
    expect_fits_a_phone(page, shots / "completion-390.png")
    assert not chromium.errors, chromium.errors
