"""Accounts people run themselves: API tokens made (shown once) and revoked on the account page,
password changes, staff invite links that sign up exactly one person, the logged-out home page."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_client
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from playground.models import ApiToken, Invite
from playground.services.invites import invite_create
from tests.playground.conftest import in_parallel
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

PASSWORD = "correct horse battery staple"
NEW_PASSWORD = "a different long passphrase"
KEY = re.compile(r"cdn_[A-Za-z0-9_-]{40,}")


@pytest.fixture(autouse=True)
def fast_and_clean(redis_server: Any, settings: Any) -> None:
    """A real Redis for the throttle with no counts left by another test, and a fast password hasher."""
    store = redis_client.Redis.from_url(redis_server.url)
    for key in store.scan_iter("cordon-throttle:*"):
        store.delete(key)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.CORDON_SIGNUP = False


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _staff() -> Any:
    """Staff who may create accounts (auth.add_user), as invite links need."""
    from django.contrib.auth.models import Permission

    staff: Any = UserFactory(is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="add_user", content_type__app_label="auth"))
    return staff


def _new_token(client: Client, name: str = "laptop") -> str:
    response = client.post("/account/tokens/", {"name": name})
    assert response.status_code == 200
    found = KEY.findall(response.content.decode())
    assert len(set(found)) == 1, found
    return found[0]


def _sign_up(client: Client, key: str, username: str) -> Any:
    form = {"username": username, "password1": PASSWORD, "password2": PASSWORD}
    return client.post(f"/accounts/signup/?invite={key}", form)


# --- tokens -------------------------------------------------------------------------------------


def test_a_new_token_is_shown_once_uncached_and_works_as_a_bearer_on_the_api() -> None:
    user: Any = UserFactory()
    client = _client(user)
    response = client.post("/account/tokens/", {"name": "laptop"})
    page = response.content.decode()
    assert "you will not see it again" in page
    assert "no-store" in response["Cache-Control"]
    key = KEY.findall(page)[0]

    listed = client.get("/account/").content.decode()
    assert "laptop" in listed and key[:12] in listed and key not in listed  # the prefix only, ever again
    token = ApiToken.objects.get(user=user)
    assert token.name == "laptop" and key not in token.key_hash

    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_revoked_token_gets_401() -> None:
    user: Any = UserFactory()
    client = _client(user)
    key = _new_token(client)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/runs").status_code == 200
    token = ApiToken.objects.get(user=user)
    response = client.post(f"/account/tokens/{token.id}/revoke/", follow=True)
    assert "Token revoked" in response.content.decode()
    assert api.get("/api/runs").status_code == 401
    token.refresh_from_db()  # the row stays, the record of the revocation
    assert token.revoked_at is not None and token.revoked_by == user
    assert token.prefix not in client.get("/account/").content.decode()  # no longer listed as in use
    assert client.post(f"/account/tokens/{token.id}/revoke/").status_code == 404  # once


def test_only_your_own_tokens_can_be_revoked() -> None:
    owner: Any = UserFactory()
    other: Any = UserFactory()
    key = _new_token(_client(owner))
    token = ApiToken.objects.get(user=owner)
    assert _client(other).post(f"/account/tokens/{token.id}/revoke/").status_code == 404
    assert Client(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/runs").status_code == 200
    assert owner.username not in _client(other).get("/account/").content.decode()


def test_tokens_are_made_and_revoked_only_by_post_from_a_logged_in_user() -> None:
    user = UserFactory()
    assert _client(user).get("/account/tokens/").status_code == 405
    anonymous = Client().post("/account/tokens/", {"name": "x"})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert not ApiToken.objects.exists()


def test_the_header_links_the_user_name_to_the_account_page() -> None:
    user = UserFactory()
    page = _client(user).get("/runs/").content.decode()
    assert 'href="/account/"' in page and user.username in page


# --- password -----------------------------------------------------------------------------------


def test_a_password_change_keeps_the_session_and_the_old_password_stops_working() -> None:
    user = UserFactory()
    client = _client(user)
    form = {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    response = client.post("/account/password/", form, follow=True)
    assert "Password changed" in response.content.decode()
    assert client.get("/account/").status_code == 200  # still logged in
    assert not Client().login(username=user.username, password=PASSWORD)
    assert Client().login(username=user.username, password=NEW_PASSWORD)


def test_a_wrong_current_password_is_refused_and_shown() -> None:
    user = UserFactory()
    client = _client(user)
    form = {"old_password": "not it", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    response = client.post("/account/password/", form)
    assert response.status_code == 400
    assert "old password was entered incorrectly" in response.content.decode()
    assert Client().login(username=user.username, password=PASSWORD)


# --- invites ------------------------------------------------------------------------------------


def _make_invite(client: Client, note: str = "for Bea", days: int = 7) -> str:
    response = client.post("/account/invites/new/", {"note": note, "lifetime_days": days})
    assert response.status_code == 200, response.content[:500]
    page = response.content.decode()
    assert "you will not see it again" in page and "no-store" in response["Cache-Control"]
    link = re.search(r"http://testserver/accounts/signup/\?invite=(inv_[A-Za-z0-9_-]+)", page)
    assert link is not None
    return link.group(1)


@pytest.mark.parametrize("who", ["user", "staff without add_user"])
def test_only_staff_who_may_create_accounts_can_make_see_or_revoke_invites(who: str) -> None:
    user = UserFactory(is_staff=who != "user")
    invite_create(by=_staff(), note="someone")
    invite = Invite.objects.get()
    client = _client(user)
    assert client.get("/account/invites/").status_code == 403
    assert client.post("/account/invites/new/", {"note": "x", "lifetime_days": 7}).status_code == 403
    assert client.post(f"/account/invites/{invite.id}/revoke/").status_code == 403
    assert Client().get("/account/invites/").status_code == 302  # to the log-in page
    assert Invite.objects.count() == 1
    assert "Invite links" not in client.get("/account/").content.decode()


def test_an_invite_link_signs_up_exactly_one_person_while_signup_is_off() -> None:
    staff = _staff()
    key = _make_invite(_client(staff), note="for Bea")
    assert Invite.objects.get().key_hash != key and key not in Invite.objects.get().key_hash
    assert Client().get("/accounts/signup/").status_code == 404  # closed without a link

    bea = Client()
    assert bea.get(f"/accounts/signup/?invite={key}").status_code == 200
    response = _sign_up(bea, key, "bea")
    assert response.status_code == 302
    assert bea.get("/account/").context["user"].username == "bea"  # logged in as the new account

    invite = Invite.objects.get()
    assert invite.used_by == User.objects.get(username="bea") and invite.used_at is not None
    listed = _client(staff).get("/account/invites/").content.decode()
    assert "used by bea" in listed and "for Bea" in listed

    again = _sign_up(Client(), key, "mallory")
    assert again.status_code == 410 and "already been used" in again.content.decode()
    assert Client().get(f"/accounts/signup/?invite={key}").status_code == 410
    assert not User.objects.filter(username="mallory").exists()


def test_a_bad_form_does_not_use_up_the_invite() -> None:
    key = invite_create(by=_staff())
    response = Client().post(
        f"/accounts/signup/?invite={key}", {"username": "bea", "password1": PASSWORD, "password2": "other"}
    )
    assert response.status_code == 200 and "password fields didn" in response.content.decode()
    assert Invite.objects.get().used_at is None
    assert _sign_up(Client(), key, "bea").status_code == 302


def test_an_expired_invite_is_refused_with_a_clear_page() -> None:
    key = invite_create(by=_staff())
    Invite.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    for response in (Client().get(f"/accounts/signup/?invite={key}"), _sign_up(Client(), key, "late")):
        assert response.status_code == 410
        assert "has expired" in response.content.decode()
    assert not User.objects.filter(username="late").exists()
    assert "expired" in _client(_staff()).get("/account/invites/").content.decode()


def test_an_unknown_invite_is_a_clear_page_and_guessing_is_throttled(settings: Any) -> None:
    settings.CORDON_AUTH_FAILURES_PER_ADDRESS = 5
    guesser = Client(REMOTE_ADDR="203.0.113.9")
    first = guesser.get("/accounts/signup/?invite=inv_guess")
    assert first.status_code == 404 and "not valid" in first.content.decode()
    statuses = [guesser.get(f"/accounts/signup/?invite=inv_guess{i}").status_code for i in range(6)]
    assert statuses[:4] == [404] * 4 and set(statuses[4:]) == {429}
    # Locked out, a real link from that address waits too; from elsewhere it works.
    key = invite_create(by=_staff())
    locked = guesser.get(f"/accounts/signup/?invite={key}")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "Too many failed attempts" in locked.content.decode()
    assert Client(REMOTE_ADDR="198.51.100.4").get(f"/accounts/signup/?invite={key}").status_code == 200


def test_a_used_or_expired_invite_is_not_counted_as_a_guess(settings: Any) -> None:
    settings.CORDON_AUTH_FAILURES_PER_ADDRESS = 2
    key = invite_create(by=_staff())
    assert _sign_up(Client(), key, "bea").status_code == 302
    clicks = [Client().get(f"/accounts/signup/?invite={key}").status_code for _ in range(4)]
    assert clicks == [410] * 4


def test_invite_lifetime_is_one_to_thirty_days() -> None:
    client = _client(_staff())
    for days in (0, 31):
        response = client.post("/account/invites/new/", {"note": "x", "lifetime_days": days})
        assert response.status_code == 400
    assert not Invite.objects.exists()
    _make_invite(client, days=30)
    expires = Invite.objects.get().expires_at - timezone.now()
    assert timedelta(days=29, hours=23) < expires <= timedelta(days=30)


def test_staff_revoke_an_unused_invite_but_not_a_used_one() -> None:
    staff = _client(_staff())
    unused, used = _make_invite(staff, note="unused"), _make_invite(staff, note="used")
    assert _sign_up(Client(), used, "bea").status_code == 302
    by_note = {i.note: i for i in Invite.objects.all()}
    assert staff.post(f"/account/invites/{by_note['used'].id}/revoke/").status_code == 404
    response = staff.post(f"/account/invites/{by_note['unused'].id}/revoke/", follow=True)
    assert "Invite revoked" in response.content.decode()
    assert Client().get(f"/accounts/signup/?invite={unused}").status_code == 404
    assert Invite.objects.get().note == "used"


@pytest.mark.django_db(transaction=True)
def test_two_people_racing_with_one_link_make_one_account() -> None:
    key = invite_create(by=_staff())
    statuses = in_parallel(4, lambda i: _sign_up(Client(), key, f"racer{i}").status_code)
    assert sorted(statuses) == [302, 410, 410, 410]
    assert User.objects.filter(username__startswith="racer").count() == 1
    assert Invite.objects.get().used_by == User.objects.get(username__startswith="racer")


def test_signup_stays_open_to_all_where_the_operator_enabled_it(settings: Any) -> None:
    assert "by invitation" in Client().get("/accounts/signup/").content.decode()
    settings.CORDON_SIGNUP = True
    form = {"username": "open", "password1": PASSWORD, "password2": PASSWORD}
    assert Client().post("/accounts/signup/", form).status_code == 302
    assert "sign up" in Client().get("/accounts/login/").content.decode()


# --- public pages -------------------------------------------------------------------------------


def test_favicon_ico_is_answered() -> None:
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200
    assert response.redirect_chain[0][0].endswith("favicon.svg")


def test_the_logged_out_home_page_says_what_cordon_is_and_how_to_get_an_account() -> None:
    page = Client().get("/").content.decode()
    for words in ("untrusted Python and JavaScript", "disposable sandbox", "supervised from outside",
                  "Notebooks", "Datasets", "Live output", "invite link", "ensure_admin"):  # fmt: skip
        assert words in page, words
    assert "does not let visitors sign up" in page


def test_the_log_in_page_shows_errors_beside_a_styled_form() -> None:
    response = Client().post("/accounts/login/", {"username": "nobody", "password": "wrong"})
    page = response.content.decode()
    assert 'class="form-errors"' in page and "correct username and password" in page
    assert 'href="/static/css/site.css"' in page
