"""Single sign-on as a person sees it, in Chromium: the log-in page with passwords off offers only the
provider, the provider's form, the return signed in, the log-out that ends the provider's session
too; a return that is refused says why. Screenshots at a desktop's and a 390 px phone's width."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.conftest import free_port
from tests.playground.conftest import serve_web
from tests.playground.sso.provider import SECRET, LoopbackProvider
from tests.playground.test_browser import (  # noqa: F401 - shots is a fixture
    BROWSER_MARKS,
    CHROMIUM,
    DESKTOP,
    expect_fits_a_phone,
    shots,
)

pytestmark = BROWSER_MARKS


@pytest.fixture
def sso_site(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[tuple[str, LoopbackProvider]]:
    """The web server as `make run` starts it, signing people in only through a provider on loopback."""
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/accounts/oidc/callback/"
    client = {"client_id": "cordon", "client_secret": SECRET, "redirect_uris": [redirect],
              "post_logout_redirect_uris": [f"http://127.0.0.1:{port}/accounts/login/"],
              "token_endpoint_auth_method": "client_secret_post"}  # fmt: skip
    with LoopbackProvider(tmp_path, [client]) as provider:
        provider.set_account("alice", preferred_username="alice", email="alice@example.org", groups=["teachers"])
        env = {**worker_env, "CORDON_OIDC_ISSUER": provider.url, "CORDON_OIDC_CLIENT_ID": "cordon",
               "CORDON_OIDC_CLIENT_SECRET": SECRET, "CORDON_OIDC_PROVIDER_NAME": "Campus ID",
               "CORDON_OIDC_SCOPES": "openid email profile groups",
               "CORDON_OIDC_INSTRUCTOR_GROUPS": "teachers", "CORDON_PASSWORD_LOGIN": "false"}  # fmt: skip
        with serve_web(env, port=port) as base:
            yield base, provider


def test_a_person_signs_in_through_the_provider_and_a_refused_return_says_why(
    sso_site: tuple[str, LoopbackProvider],
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect, sync_playwright

    base, _ = sso_site
    desktop: Any = DESKTOP
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page: Any = browser.new_page(viewport=desktop)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{base}/accounts/login/")
        sign_in = page.get_by_role("link", name="Sign in with Campus ID")
        expect(sign_in).to_be_visible()
        expect(page.get_by_label("Password")).to_have_count(0)  # passwords are off: no form for one
        page.screenshot(path=shots / "sso-login-desktop.png", full_page=True)
        expect_fits_a_phone(page, shots / "sso-login-phone.png")

        sign_in.click()
        page.locator("input[name=login]").fill("alice")  # the provider's own form
        page.locator("input[name=login]").press("Enter")
        page.wait_for_url(f"{base}/**")
        expect(page.get_by_text("alice").first).to_be_visible()
        page.screenshot(path=shots / "sso-signed-in-desktop.png", full_page=True)

        # Log out: Cordon's session, then the provider's (it asks), then back on the log-in page.
        page.get_by_role("button", name="Log out").click()
        yes = page.get_by_role("button", name="Yes, sign me out")  # the provider's own page
        expect(yes).to_be_visible()
        yes.click()
        page.wait_for_url(f"{base}/accounts/login/")
        expect(page.get_by_role("link", name="Sign in with Campus ID")).to_be_visible()
        page.screenshot(path=shots / "sso-signed-out-desktop.png", full_page=True)
        page.get_by_role("link", name="Sign in with Campus ID").click()
        expect(page.locator("input[name=login]")).to_be_visible()  # the provider asks who it is again

        other = browser.new_page(viewport=desktop)  # another browser's return: not its sign-in
        other.goto(f"{base}/accounts/oidc/callback/?code=stolen&state=not-this-browsers")
        expect(other.get_by_text("This sign-in was not started in this browser")).to_be_visible()
        other.screenshot(path=shots / "sso-refused-desktop.png", full_page=True)
        expect_fits_a_phone(other, shots / "sso-refused-phone.png")
        browser.close()
    assert errors == []
    alice = User.objects.get(username="alice")  # made by the sign-in, with what the provider said
    assert alice.email == "alice@example.org" and alice.groups.filter(name="instructors").exists()
    assert not alice.has_usable_password()
