"""A notebook's environment, chosen in its toolbar in a real browser: its cells then import what the
environment has (polars in python-data), the choice survives a reload, and a cell's `%pip install`
names where a package is. At a desktop's width and a phone's."""

from __future__ import annotations

from pathlib import Path

from tests.playground.test_browser import (  # noqa: F401 - fixtures
    BROWSER_MARKS,
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


def test_an_analyst_picks_python_data_and_the_cells_import_polars(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    choice = page.locator("#notebook-environment")
    expect(choice).to_have_value("")  # Default: each runtime's own image
    _type_code(page, _cell(page, 0), "%pip install polars")
    page.keyboard.press("Shift+Enter")
    _expect_outcome(_cell(page, 0), "succeeded")
    expect(_cell(page, 0).locator("pre.stderr")).to_contain_text("polars is not in this environment; it is in: "
                                                                  "python-data")  # fmt: skip

    choice.select_option("python-data")
    _expect_saved(page)
    _type_code(page, _cell(page, 0), "import polars as pl\npl.DataFrame({'a': [1, 2], 'b': [3, 4]}).shape")
    page.keyboard.press("Shift+Enter")
    _expect_outcome(_cell(page, 0), "succeeded")
    expect(_cell(page, 0).locator(".displays pre")).to_have_text("(2, 2)")
    page.screenshot(path=shots / "notebook-environment-1280.png", full_page=True)
    expect_fits_a_phone(page, shots / "notebook-environment-390.png")

    page.reload()
    expect(page.locator("#notebook-environment")).to_have_value("python-data")
