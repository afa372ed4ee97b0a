"""Accounts in a real browser: a token made and revoked on the account page (the key shown once
works against the API, then stops), and an invite link a new person signs up with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.playground.test_browser import (  # noqa: F401 - chromium, shots and site are fixtures
    BROWSER_MARKS,
    NOTEBOOK_URL,
    PASSWORD,
    Browser,
    chromium,
    shots,
    site,
)

pytestmark = BROWSER_MARKS


def _expect_status_logged(driven: Browser, label: str, status: int) -> None:
    """Chromium logs a page answered 404 or 410 as a console error; here that status is the point."""
    expected = [e for e in driven.errors if e[0] == label and f"status of {status}" in e[1]]
    assert expected, driven.errors
    driven.errors.remove(expected[0])


def _api_status(driven: Browser, key: str) -> int:
    """GET /api/runs with this bearer token from a context with no session cookie."""
    context = driven.context()
    try:
        response = context.request.get(f"{driven.site}/api/runs", headers={"Authorization": f"Bearer {key}"})
        return int(response.status)
    finally:
        context.close()


def test_a_user_creates_a_token_uses_it_on_the_api_and_revokes_it(
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = chromium.logged_in()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site)
    page.get_by_role("link", name="ana").click()
    expect(page).to_have_url(f"{site}/account/")
    expect(page.locator("#tokens")).to_contain_text("No tokens yet.")
    page.fill("#id_name", "laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".secret-box")).to_contain_text("you will not see it again")
    key = page.locator("#secret").inner_text().strip()
    assert re.fullmatch(r"cdn_[A-Za-z0-9_-]{40,}", key), key
    page.get_by_role("button", name="Copy").click()
    expect(page.locator(".copy-status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == key
    page.screenshot(path=shots / "account-token-shown-1280.png", full_page=True)

    assert _api_status(chromium, key) == 200

    page.get_by_role("link", name="Back to your account").click()
    row = page.locator("#tokens tbody tr", has_text="laptop")
    expect(row).to_contain_text(key[:12] + "…")
    expect(page.locator("body")).not_to_contain_text(key)  # never shown again
    expect(row.locator("td").nth(3)).not_to_have_text("never")  # the API call above
    page.screenshot(path=shots / "account-1280.png", full_page=True)
    page.set_viewport_size({"width": 800, "height": 900})
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    page.set_viewport_size({"width": 1280, "height": 900})

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="revoke token laptop").click()
    expect(page.locator(".flash")).to_contain_text("Token revoked")
    expect(page.locator("#tokens")).to_contain_text("No tokens yet.")
    assert _api_status(chromium, key) == 401


@pytest.fixture
def staff_member(transactional_db: None) -> User:
    """Made before the browser starts: the ORM refuses to run inside Playwright's event loop."""
    from django.contrib.auth.models import Permission

    sam = User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    sam.user_permissions.add(Permission.objects.get(codename="add_user", content_type__app_label="auth"))
    return sam


def test_staff_make_an_invite_link_and_a_new_person_signs_up_with_it(
    staff_member: User,
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    # Logged out, the home page says what Cordon is and how to get an account.
    visitor = chromium.page(chromium.context(), "visitor")
    visitor.goto(f"{site}/")
    expect(visitor.locator("main")).to_contain_text("disposable sandbox")
    expect(visitor.locator("main")).to_contain_text("invite link")
    visitor.screenshot(path=shots / "home-logged-out-1280.png", full_page=True)
    visitor.goto(f"{site}/accounts/signup/")
    expect(visitor.locator("h1")).to_have_text("Sign-up is by invitation")
    _expect_status_logged(chromium, "visitor", 404)

    staff = chromium.logged_in("sam")
    staff.get_by_role("link", name="sam").click()
    staff.get_by_role("link", name="Invite links").click()
    staff.fill("#id_note", "Bea from accounting")
    expect(staff.locator("#id_lifetime_days")).to_have_value("7")
    staff.get_by_role("button", name="Create invite link").click()
    expect(staff.locator(".secret-box")).to_contain_text("you will not see it again")
    link = staff.locator("#secret").inner_text().strip()
    assert link.startswith(f"{site}/accounts/signup/?invite=inv_"), link
    staff.screenshot(path=shots / "invite-link-1280.png", full_page=True)

    # The new person, in a browser of their own.
    bea = chromium.page(chromium.context(), "bea")
    bea.goto(link)
    expect(bea.locator("h1")).to_have_text("Sign up")
    bea.fill("#id_username", "bea")
    bea.fill("#id_password1", "pass")
    bea.fill("#id_password2", "pass")
    bea.get_by_role("button", name="Create account").click()
    expect(bea.locator(".field-errors").first).to_be_visible()  # too short, shown beside the field
    bea.screenshot(path=shots / "signup-errors-1280.png", full_page=True)
    bea.fill("#id_password1", PASSWORD)
    bea.fill("#id_password2", PASSWORD)
    bea.get_by_role("button", name="Create account").click()
    expect(bea).to_have_url(NOTEBOOK_URL)
    expect(bea.locator("header nav")).to_contain_text("bea")

    staff.goto(f"{site}/account/invites/")
    expect(staff.locator("#invites tbody tr", has_text="Bea from accounting")).to_contain_text("used by bea")
    staff.screenshot(path=shots / "invites-1280.png", full_page=True)

    # The link made one account; a second person gets a page saying so.
    late = chromium.page(chromium.context(), "late")
    late.goto(link)
    expect(late.locator("main")).to_contain_text("already been used")
    _expect_status_logged(chromium, "late", 410)
