"""Single sign-on against a real OpenID Provider on loopback (oidc-provider, OpenID-certified): the
authorization code flow with PKCE, accounts made at the first sign-in with roles from the groups
claim (and taken away at the next), passwords off, and every return that must be refused is, with a
page saying why, a log line, and nobody signed in."""

from __future__ import annotations

import html
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from playground.models import SsoIdentity
from playground.services.invites import invite_create
from playground.sso.config import endpoints
from tests.conftest import PYTHON, child_env, free_port
from tests.playground.sso.provider import POST_LOGOUT_URI, SITE, LoopbackProvider, client

pytestmark = pytest.mark.django_db

STAFF, TEACHERS, ADMINS = "cordon-staff", "teachers", "cordon-admins"
PASSWORD = "correct horse battery staple"
BACKENDS = {"password": "django.contrib.auth.backends.ModelBackend", "sso": "playground.sso.backend.OidcBackend"}


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackProvider]:
    clients = [client("cordon"), client("cordon-slow", codeTtlS=1)]
    with LoopbackProvider(tmp_path_factory.mktemp("op"), clients) as provider:
        provider.set_account("sub-alice", preferred_username="alice", email="alice@example.edu",
                             email_verified=True, given_name="Alice", groups=[STAFF, TEACHERS])  # fmt: skip
        provider.set_account("sub-bob", preferred_username="bob", email="bob@example.edu", groups=["students"])
        yield provider


def configure(settings: Any, issuer: str, *, client_id: str = "cordon", passwords: bool = True) -> None:
    """What the CORDON_OIDC_* variables and CORDON_PASSWORD_LOGIN make of the settings."""
    settings.CORDON_OIDC_ISSUER = issuer
    settings.CORDON_OIDC_CLIENT_ID = client_id
    settings.CORDON_OIDC_CLIENT_SECRET = "a-client-secret-of-the-tests"
    settings.CORDON_OIDC_PROVIDER_NAME = "Example University"
    settings.CORDON_OIDC_SCOPES = "openid email profile groups"
    settings.CORDON_OIDC_STAFF_GROUPS = [STAFF]
    settings.CORDON_OIDC_SUPERUSER_GROUPS = [ADMINS]
    settings.CORDON_OIDC_INSTRUCTOR_GROUPS = [TEACHERS]
    settings.CORDON_PASSWORD_LOGIN = passwords
    settings.AUTHENTICATION_BACKENDS = [*([BACKENDS["password"]] if passwords else []), BACKENDS["sso"]]


@pytest.fixture
def sso(settings: Any, op: LoopbackProvider) -> LoopbackProvider:
    configure(settings, op.url)
    return op


def start(browser: Client, next_url: str = "") -> str:
    """Cordon's side of the start: where it sends the browser (the provider's authorization URL)."""
    answer = browser.get("/accounts/oidc/start/" + (f"?next={next_url}" if next_url else ""))
    assert answer.status_code == 302, answer.content[:500]
    return str(answer["Location"])


def come_back(browser: Client, url: str) -> Any:
    assert url.startswith(SITE)
    return browser.get(url[len(SITE) :])


def sign_in(browser: Client, op: LoopbackProvider, account: str) -> Any:
    return come_back(browser, op.authorize(start(browser), account))


def signed_in(browser: Client) -> User | None:
    user_id = browser.session.get("_auth_user_id")
    return User.objects.filter(pk=user_id).first() if user_id else None


def with_query(url: str, **changes: str | None) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    for key, value in changes.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def assert_refused(answer: Any, browser: Client, caplog: pytest.LogCaptureFixture, code: str, words: str) -> None:
    text = answer.content.decode()
    assert answer.status_code == 403, text[:500]
    assert "Sign-in refused" in text and words in text and code in text
    assert signed_in(browser) is None
    assert any(
        f"sign-in refused ({code})" in r.getMessage() for r in caplog.records if r.name == "playground.sso.views"
    )


# --- accounts and roles ----------------------------------------------------------------------------


def test_a_first_sign_in_uses_pkce_and_makes_an_account_from_the_claims(sso: LoopbackProvider) -> None:
    browser = Client()
    request = parse_qs(urlsplit(start(browser, "/runs/")).query)
    assert request["code_challenge_method"] == ["S256"] and len(request["code_challenge"][0]) == 43
    assert request["nonce"][0] and request["state"][0] and "code_verifier" not in request
    assert request["redirect_uri"] == [f"{SITE}/accounts/oidc/callback/"]

    answer = sign_in(browser, sso, "sub-alice")

    assert answer.status_code == 302
    alice = signed_in(browser)
    assert alice is not None and alice.username == "alice" and alice.email == "alice@example.edu"
    assert alice.first_name == "Alice" and not alice.has_usable_password()
    assert SsoIdentity.objects.get(issuer=sso.url, subject="sub-alice").user == alice
    assert Client().login(username="alice", password="") is False


def test_the_staff_and_instructor_groups_give_the_console_and_course_rights(sso: LoopbackProvider) -> None:
    browser = Client()
    sign_in(browser, sso, "sub-alice")
    alice = User.objects.get(username="alice")
    assert alice.is_staff and not alice.is_superuser
    assert alice.has_perm("playground.view_run") and alice.has_perm("auth.view_user")  # the audit console, read-only
    assert not alice.has_perm("playground.change_workerhost") and not alice.has_perm("auth.add_user")
    assert alice.has_perm("playground.add_course")
    assert browser.get("/admin/").status_code == 200

    sign_in(Client(), sso, "sub-bob")
    bob = User.objects.get(username="bob")
    assert not bob.is_staff and not bob.has_perm("playground.view_run") and not bob.has_perm("playground.add_course")


def test_someone_taken_out_of_the_groups_loses_the_roles_at_their_next_sign_in(sso: LoopbackProvider) -> None:
    sso.set_account(
        "sub-carol", preferred_username="carol", email="carol@example.edu", groups=[STAFF, TEACHERS, ADMINS]
    )
    sign_in(Client(), sso, "sub-carol")
    carol = User.objects.get(username="carol")
    assert carol.is_staff and carol.is_superuser

    sso.set_account("sub-carol", preferred_username="carol", email="carol@new.example.edu", groups=[])
    browser = Client()
    sign_in(browser, sso, "sub-carol")

    carol = User.objects.get(pk=carol.pk)  # a fresh read: permissions are cached on the instance
    assert signed_in(browser) == carol and User.objects.filter(username__startswith="carol").count() == 1
    assert not carol.is_staff and not carol.is_superuser and carol.email == "carol@new.example.edu"
    assert not carol.has_perm("playground.view_run") and not carol.has_perm("playground.add_course")
    assert browser.get("/admin/").status_code == 302  # the console sends a non-staff account to log in


def test_a_name_a_local_account_has_is_not_merged_with_it(sso: LoopbackProvider, django_user_model: Any) -> None:
    local = django_user_model.objects.create_user("Dave", password=PASSWORD)
    sso.set_account("sub-dave", preferred_username="dave", email="dave@example.edu", groups=[STAFF])

    browser = Client()
    sign_in(browser, sso, "sub-dave")

    made = signed_in(browser)
    assert made is not None and made != local and made.username == "dave-2" and made.is_staff
    local.refresh_from_db()
    assert not local.is_staff and local.email == "" and Client().login(username="Dave", password=PASSWORD)
    sign_in(Client(), sso, "sub-dave")  # found by its subject again, whatever its name
    assert User.objects.filter(username__istartswith="dave").count() == 2


def test_a_claimed_name_is_made_a_valid_user_name(sso: LoopbackProvider) -> None:
    sso.set_account("sub-zoe", preferred_username=" Zoë Smith/ops:team ", email="zoe@example.edu")
    browser = Client()
    sign_in(browser, sso, "sub-zoe")
    made = signed_in(browser)
    assert made is not None and made.username == "Zoë-Smith-ops-team"
    made.full_clean()  # Django's own validation of the name


def test_a_deactivated_account_is_refused(sso: LoopbackProvider, caplog: pytest.LogCaptureFixture) -> None:
    sign_in(Client(), sso, "sub-bob")
    User.objects.filter(username="bob").update(is_active=False)
    browser = Client()
    assert_refused(sign_in(browser, sso, "sub-bob"), browser, caplog, "inactive_account", "deactivated")


# --- log-out -------------------------------------------------------------------------------------


def test_logging_out_after_signing_in_through_the_provider_ends_the_providers_session_too(
    sso: LoopbackProvider,
) -> None:
    browser, at_provider = Client(), requests.Session()  # one person's browser: at Cordon, at the provider
    come_back(browser, sso.authorize(start(browser), "sub-alice", at_provider))
    hint = browser.session["oidc_id_token"]
    assert signed_in(browser) is not None and hint.count(".") == 2  # the ID token, a JWT
    asked = sso.logins_asked
    again = Client()
    come_back(again, sso.authorize(start(again), "sub-alice", at_provider))
    assert signed_in(again) is not None and sso.logins_asked == asked  # the provider remembered them

    answer = browser.post("/accounts/logout/")
    assert answer.status_code == 200 and signed_in(browser) is None
    page = answer.content.decode()
    found = re.search(r'<meta http-equiv="refresh" content="0; url=([^"]+)">', page)
    assert found is not None and "Logged out of Cordon" in page, page
    url = html.unescape(found.group(1))
    assert f'href="{found.group(1)}"' in page  # and a link to it, for a browser that does not refresh
    ending = urlsplit(url)
    assert urlunsplit(ending._replace(query="")) == endpoints(sso.url).end_session != ""
    assert parse_qs(ending.query) == {"id_token_hint": [hint], "client_id": ["cordon"],
                                      "post_logout_redirect_uri": [POST_LOGOUT_URI]}  # fmt: skip
    assert sso.end_session(url, at_provider) == POST_LOGOUT_URI  # back on the log-in page

    later = Client()
    come_back(later, sso.authorize(start(later), "sub-alice", at_provider))
    assert signed_in(later) is not None and sso.logins_asked == asked + 1  # asked to log in again


def test_the_consoles_log_out_ends_the_providers_session_too(sso: LoopbackProvider) -> None:
    browser, at_provider = Client(), requests.Session()
    sso.set_account("sub-ivy", preferred_username="ivy", email="ivy@example.edu", groups=[STAFF])
    come_back(browser, sso.authorize(start(browser), "sub-ivy", at_provider))
    assert browser.get("/admin/").status_code == 200
    answer = browser.post("/admin/logout/")  # the console's own Log out button
    assert answer.status_code == 200 and signed_in(browser) is None
    found = re.search(r'<meta http-equiv="refresh" content="0; url=([^"]+)">', answer.content.decode())
    assert found is not None
    assert sso.end_session(html.unescape(found.group(1)), at_provider) == POST_LOGOUT_URI


def test_a_provider_unreachable_at_log_out_still_logs_out_of_cordon(
    sso: LoopbackProvider, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    browser = Client()
    sign_in(browser, sso, "sub-bob")
    assert signed_in(browser) is not None
    settings.CORDON_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"  # nothing answers there
    answer = browser.post("/accounts/logout/")
    assert (answer.status_code, answer["Location"]) == (302, "/") and signed_in(browser) is None
    assert any("log-out at the provider skipped (provider_unreachable)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("https://idp.example.edu/logout?tenant=a#top", "https://idp.example.edu/logout?tenant=a&id_token_hint=t&"),
        ("http://idp.example.edu/logout", ""),  # not https, and not on loopback
        ("javascript:alert(1)", ""),
        ("//idp.example.edu/logout", ""),
    ],
)
def test_the_end_session_url_is_https_and_keeps_the_providers_own_query(
    settings: Any, monkeypatch: pytest.MonkeyPatch, endpoint: str, expected: str
) -> None:
    from playground.sso import views
    from playground.sso.config import Endpoints, sso_config

    configure(settings, "https://idp.example.edu")
    monkeypatch.setattr(views, "endpoints", lambda issuer: Endpoints("a", "t", "j", "", end_session=endpoint))
    config = sso_config()
    assert config is not None
    request = RequestFactory().post("/accounts/logout/")
    made = views._provider_log_out(request, config, "t")
    assert made.startswith(expected) if expected else made == ""
    if expected:
        assert "#" not in made and parse_qs(urlsplit(made).query)["tenant"] == ["a"]


def test_a_password_log_in_logs_out_of_cordon_alone(sso: LoopbackProvider, django_user_model: Any) -> None:
    django_user_model.objects.create_user("gina", password=PASSWORD)
    browser = Client()
    assert browser.login(username="gina", password=PASSWORD)
    answer = browser.post("/accounts/logout/")
    assert (answer.status_code, answer["Location"]) == (302, "/") and signed_in(browser) is None


def test_with_a_provider_offering_no_end_session_a_log_out_is_cordons_alone(settings: Any, tmp_path: Path) -> None:
    with LoopbackProvider(tmp_path, [client("cordon")], logout=False) as provider:
        provider.set_account("sub-hal", preferred_username="hal", email="hal@example.edu")
        configure(settings, provider.url)
        assert endpoints(provider.url).end_session == ""
        browser = Client()
        sign_in(browser, provider, "sub-hal")
        assert signed_in(browser) is not None
        answer = browser.post("/accounts/logout/")
        assert (answer.status_code, answer["Location"]) == (302, "/") and signed_in(browser) is None


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["another state", "another browser", "a return used already"])
def test_a_return_with_a_wrong_state_is_refused(
    sso: LoopbackProvider, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    browser = Client()
    back = sso.authorize(start(browser), "sub-bob")
    if how == "another state":
        back = with_query(back, state="x" + parse_qs(urlsplit(back).query)["state"][0])
    elif how == "another browser":  # a forged log-in: someone else's return, in this browser
        browser = Client()
    else:
        come_back(browser, back)
        browser.post("/accounts/logout/")
        assert signed_in(browser) is None
    assert_refused(come_back(browser, back), browser, caplog, "wrong_state", "not started in this browser")
    assert how == "a return used already" or not User.objects.filter(username="bob").exists()


def test_an_id_token_with_another_nonce_is_refused(sso: LoopbackProvider, caplog: pytest.LogCaptureFixture) -> None:
    browser = Client()
    request = with_query(start(browser), nonce="a-nonce-this-sign-in-never-made")
    answer = come_back(browser, sso.authorize(request, "sub-bob"))
    assert_refused(answer, browser, caplog, "wrong_nonce", "nonce differs")
    assert not User.objects.filter(username="bob").exists()


def test_an_expired_code_is_refused(settings: Any, op: LoopbackProvider, caplog: pytest.LogCaptureFixture) -> None:
    configure(settings, op.url, client_id="cordon-slow")  # its codes live one second
    browser = Client()
    back = op.authorize(start(browser), "sub-bob")
    time.sleep(2.5)
    assert_refused(come_back(browser, back), browser, caplog, "code_refused", "expired")
    assert not User.objects.filter(username="bob").exists()


def test_a_code_presented_with_another_sign_ins_pkce_verifier_is_refused(
    sso: LoopbackProvider, caplog: pytest.LogCaptureFixture
) -> None:
    browser = Client()
    first = start(browser)
    second_state = parse_qs(urlsplit(start(browser)).query)["state"][0]
    back = sso.authorize(first, "sub-bob")
    # The first sign-in's code, returned as the second's: the second's verifier does not fit its challenge.
    assert_refused(come_back(browser, with_query(back, state=second_state)), browser, caplog, "code_refused", "code")
    assert come_back(browser, back).status_code == 302  # the code with its own verifier still works
    assert signed_in(browser) == User.objects.get(username="bob")


@pytest.fixture
def mixed_up(settings: Any, tmp_path: Path) -> Iterator[LoopbackProvider]:
    """A provider whose discovery document names it (its URL) while its tokens name another issuer."""
    with LoopbackProvider(tmp_path, [client("cordon")], mix_up=True) as provider:
        provider.set_account("sub-eve", preferred_username="eve", email="eve@example.edu", groups=[ADMINS])
        configure(settings, provider.url)
        yield provider


@pytest.mark.parametrize("where", ["in the answer", "in the ID token"])
def test_an_unknown_issuer_is_refused(mixed_up: LoopbackProvider, caplog: pytest.LogCaptureFixture, where: str) -> None:
    assert mixed_up.issuer != mixed_up.url
    browser = Client()
    back = mixed_up.authorize(start(browser), "sub-eve")
    assert parse_qs(urlsplit(back).query)["iss"] == [mixed_up.issuer]  # RFC 9207: the answer names its issuer
    if where == "in the ID token":
        back = with_query(back, iss=None)  # an answer without it: the ID token's iss is checked all the same
    answer = come_back(browser, back)
    assert_refused(answer, browser, caplog, "unknown_issuer", mixed_up.issuer)
    assert ("ID token" in answer.content.decode()) == (where == "in the ID token")
    assert not User.objects.filter(username="eve").exists()


def test_a_provider_whose_discovery_names_another_issuer_is_refused_at_the_start(
    settings: Any, op: LoopbackProvider, caplog: pytest.LogCaptureFixture
) -> None:
    configure(settings, op.url + "/")  # not the issuer its discovery document names (no slash)
    browser = Client()
    answer = browser.get("/accounts/oidc/start/")
    assert_refused(answer, browser, caplog, "unknown_issuer", "says its issuer is")


def test_an_unreachable_provider_is_said_at_the_start(settings: Any, tmp_path: Path) -> None:
    with LoopbackProvider(tmp_path, [client("cordon")]) as gone:
        url = gone.url
    configure(settings, url)
    answer = Client().get("/accounts/oidc/start/")
    assert answer.status_code == 502 and "could not be reached" in answer.content.decode()


def test_refused_returns_count_against_the_address(sso: LoopbackProvider, settings: Any, redis_server: Any) -> None:
    settings.CORDON_AUTH_FAILURES_PER_ADDRESS = 2
    browser = Client()
    for _ in range(2):
        back = sso.authorize(start(browser), "sub-bob")
        assert come_back(browser, with_query(back, state="forged")).status_code == 403
    answer = sign_in(browser, sso, "sub-bob")
    assert answer.status_code == 429 and "Too many failed sign-ins" in answer.content.decode()
    assert signed_in(browser) is None


# --- passwords off, and SSO off ---------------------------------------------------------------------


def test_with_passwords_off_sso_is_the_only_way_in(
    settings: Any, op: LoopbackProvider, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    local = django_user_model.objects.create_user("frank", password=PASSWORD, is_staff=True, is_superuser=True)
    earlier = Client()
    earlier.force_login(local, backend=BACKENDS["password"])
    configure(settings, op.url, passwords=False)

    page = Client().get("/accounts/login/?next=/runs/").content.decode()
    assert "Sign in with Example University" in page and "/accounts/oidc/start/?next=/runs/" in page
    assert 'type="password"' not in page and "sign up" not in page.lower()

    browser = Client()
    posted = browser.post("/accounts/login/", {"username": "frank", "password": PASSWORD})
    assert posted.status_code == 403 and "does not take passwords" in posted.content.decode()
    assert signed_in(browser) is None
    assert any("passwords are off" in r.getMessage() for r in caplog.records)

    assert earlier.get("/account/").status_code == 302  # the session a password opened has ended
    admin_login = browser.get("/admin/login/?next=/admin/")
    assert admin_login.status_code == 302 and admin_login["Location"] == "/accounts/login/?next=%2Fadmin%2F"
    settings.CORDON_SIGNUP = True
    assert browser.get("/accounts/signup/").status_code == 404
    key = invite_create(by=local, note="", lifetime_days=7)
    closed = browser.get(f"/accounts/signup/?invite={key}")
    assert closed.status_code == 404 and "first time you sign in with Example University" in closed.content.decode()

    sign_in(browser, op, "sub-bob")
    assert signed_in(browser) == User.objects.get(username="bob")
    assert "Change password" not in browser.get("/account/").content.decode()
    assert browser.post("/account/password/", {"old_password": "", "new_password1": "x"}).status_code == 403


def test_with_passwords_on_the_log_in_page_offers_both(sso: LoopbackProvider) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Example University" in page and 'type="password"' in page
    assert Client().get("/admin/login/").status_code == 302  # to the page that offers both


def test_with_nothing_configured_there_is_no_single_sign_on(django_user_model: Any) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with" not in page and 'type="password"' in page
    assert Client().get("/accounts/oidc/start/").status_code == 404
    assert Client().get("/accounts/oidc/callback/?code=a&state=b").status_code == 404
    assert Client().get("/admin/login/").status_code == 200  # Django's own form, as before


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CORDON_PASSWORD_LOGIN": "false"}, "CORDON_PASSWORD_LOGIN=false needs CORDON_OIDC_ISSUER"),
        ({"CORDON_OIDC_ISSUER": "http://idp.example.edu"}, "CORDON_OIDC_ISSUER must be an https:// URL"),
        ({"CORDON_OIDC_ISSUER": "https://idp.example.edu"},
         "CORDON_OIDC_ISSUER needs CORDON_OIDC_CLIENT_ID and CORDON_OIDC_CLIENT_SECRET"),
        ({"CORDON_OIDC_ISSUER": "https://idp.example.edu", "CORDON_OIDC_CLIENT_ID": "c",
          "CORDON_OIDC_CLIENT_SECRET": "s", "CORDON_OIDC_SIGN_ALGO": "HS256"}, "CORDON_OIDC_SIGN_ALGO must be one of"),
    ],
)  # fmt: skip
def test_a_malformed_sso_configuration_stops_start_up(project_root: Path, env: dict[str, str], message: str) -> None:
    result = subprocess.run([PYTHON, "manage.py", "check"], cwd=project_root, env=child_env(**env),
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode != 0 and f"Cordon configuration error: {message}" in result.stderr


def test_a_configured_issuer_adds_the_sso_backend(project_root: Path) -> None:
    env = {"CORDON_OIDC_ISSUER": "https://idp.example.edu", "CORDON_OIDC_CLIENT_ID": "c",
           "CORDON_OIDC_CLIENT_SECRET": "s", "CORDON_PASSWORD_LOGIN": "false"}  # fmt: skip
    code = "import django; django.setup(); from django.conf import settings; print(settings.AUTHENTICATION_BACKENDS)"
    result = subprocess.run([PYTHON, "-c", code], cwd=project_root, capture_output=True, text=True, timeout=60,
                            env=child_env(DJANGO_SETTINGS_MODULE="playground.settings", **env))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([BACKENDS["sso"]])
