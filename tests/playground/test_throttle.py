"""Failed authentication is throttled per client address and per account: 429 with Retry-After."""

from __future__ import annotations

import time
import unicodedata
from typing import Any

import pytest
import redis as redis_client
from django.test import Client

from playground import throttle
from playground.services import accounts as account_services
from playground.services.accounts import token_create
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

PASSWORD = "correct horse battery staple"
LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def throttle_store(redis_server: Any, settings: Any) -> None:
    """A real Redis with no counts left by another test, small limits, and a fast password hasher."""
    store = redis_client.Redis.from_url(redis_server.url)
    for key in store.scan_iter("cordon-throttle:*"):
        store.delete(key)
    settings.CORDON_AUTH_FAILURES_PER_ADDRESS = 20
    settings.CORDON_AUTH_FAILURES_PER_ACCOUNT = 5
    settings.CORDON_AUTH_THROTTLE_WINDOW_S = 900
    # Hashing is not what is under test; the default hasher would take seconds per attempt.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _login(client: Client, page: str, username: str, password: str) -> Any:
    return client.post(page, {"username": username, "password": password})


def test_bad_bearer_tokens_from_one_address_are_answered_429_with_retry_after() -> None:
    attacker = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_not-a-real-token")
    statuses = [attacker.get("/api/runs").status_code for _ in range(30)]
    assert statuses[:20] == [401] * 20 and set(statuses[20:]) == {429}
    response = attacker.get("/api/runs")
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 900
    body = response.json()
    assert body["code"] == "throttled" and body["field"] is None and "try again in" in body["message"]


def test_the_lockout_lives_in_redis_where_every_web_process_sees_it(redis_server: Any) -> None:
    for _ in range(20):
        Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_bad").get("/api/runs")
    store = redis_client.Redis.from_url(redis_server.url)
    assert list(store.scan_iter("cordon-throttle:*:lock:address:203.0.113.7"))


def test_a_locked_out_address_is_refused_before_any_token_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    owner: Any = UserFactory()
    good = token_create(user=owner)
    attacker = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_not-a-real-token")
    for _ in range(20):
        attacker.get("/api/runs")
    lookups: list[str] = []
    real_lookup = account_services.token_user

    def counted_lookup(*, token: str) -> Any:
        lookups.append(token)
        return real_lookup(token=token)

    monkeypatch.setattr(account_services, "token_user", counted_lookup)
    response = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION=f"Bearer {good}").get("/api/runs")
    assert response.status_code == 429 and "Retry-After" in response
    assert lookups == []


def test_a_good_token_from_another_address_still_works() -> None:
    owner: Any = UserFactory()
    good = token_create(user=owner)
    attacker = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_not-a-real-token")
    for _ in range(25):
        attacker.get("/api/runs")
    assert attacker.get("/api/runs").status_code == 429
    assert Client(REMOTE_ADDR="198.51.100.2", HTTP_AUTHORIZATION=f"Bearer {good}").get("/api/runs").status_code == 200


def test_addresses_in_one_ipv6_64_share_one_count() -> None:
    for host in range(20):
        Client(REMOTE_ADDR=f"2001:db8:1:2::{host + 1:x}", HTTP_AUTHORIZATION="Bearer cdn_bad").get("/api/runs")
    fresh_host = Client(REMOTE_ADDR="2001:db8:1:2:ffff::1", HTTP_AUTHORIZATION="Bearer cdn_bad")
    assert fresh_host.get("/api/runs").status_code == 429
    other_network = Client(REMOTE_ADDR="2001:db8:1:3::1", HTTP_AUTHORIZATION="Bearer cdn_bad")
    assert other_network.get("/api/runs").status_code == 401


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_thirty_wrong_passwords_then_the_right_one_is_refused_with_429(page: str) -> None:
    user: Any = UserFactory(is_staff=True)
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    statuses = [_login(attacker, page, user.username, f"guess {n}").status_code for n in range(30)]
    assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
    response = _login(attacker, page, user.username, PASSWORD)
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 900
    assert "Too many failed log-ins" in response.content.decode()
    assert "_auth_user_id" not in attacker.session


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_a_locked_account_is_refused_from_every_address(page: str) -> None:
    user: Any = UserFactory(is_staff=True)
    for n in range(5):
        _login(Client(REMOTE_ADDR=f"203.0.113.{n + 1}"), page, user.username, f"guess {n}")
    assert _login(Client(REMOTE_ADDR="198.51.100.2"), page, user.username, PASSWORD).status_code == 429
    assert _login(Client(REMOTE_ADDR="198.51.100.2"), page, user.username.upper(), PASSWORD).status_code == 429


class _RecordedNormalize:
    """playground.throttle's view of unicodedata, recording the length of each string it normalises."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def normalize(self, form: Any, text: str) -> str:
        self.lengths.append(len(text))
        return unicodedata.normalize(form, text)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_a_megabytes_long_user_name_is_read_no_further_than_an_account_name_can_be(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = _RecordedNormalize()
    monkeypatch.setattr(throttle, "unicodedata", recorded)
    name = "\u00bd" * ((4 << 20) // 8)  # "½", which NFKC makes three characters: slow to normalise, and no account
    response = _login(Client(REMOTE_ADDR="203.0.113.7"), page, name, "guess")
    assert response.status_code == 200  # the form's own refusal: a name that long is no account's
    assert recorded.lengths and max(recorded.lengths) <= 150
    # Only what a name can be is looked at: the rest does not change the count it is checked against.
    assert throttle.account_subject("a" * 150 + "b" * (4 << 20)) == throttle.account_subject("a" * 150 + "c")


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_a_locked_account_is_refused_under_a_name_padded_with_spaces(page: str) -> None:
    user: Any = UserFactory(is_staff=True)
    for n in range(5):
        _login(Client(REMOTE_ADDR=f"203.0.113.{n + 1}"), page, user.username, f"guess {n}")
    padded = " " * (1 << 20) + user.username.upper() + "\t" * 1000  # the form strips it back to the name
    assert _login(Client(REMOTE_ADDR="198.51.100.2"), page, padded, PASSWORD).status_code == 429


def test_guesses_spread_over_many_accounts_lock_the_address_not_the_accounts() -> None:
    users: list[Any] = [UserFactory() for _ in range(20)]
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for user in users:
        assert _login(attacker, "/accounts/login/", user.username, "Summer2026!").status_code == 200
    assert _login(attacker, "/accounts/login/", users[0].username, PASSWORD).status_code == 429
    owner = Client(REMOTE_ADDR="198.51.100.2")
    assert _login(owner, "/accounts/login/", users[0].username, PASSWORD).status_code == 302


def test_bad_tokens_and_wrong_passwords_share_the_address_count() -> None:
    user: Any = UserFactory()
    for _ in range(20):
        Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_bad").get("/api/runs")
    assert _login(Client(REMOTE_ADDR="203.0.113.7"), "/accounts/login/", user.username, PASSWORD).status_code == 429


def test_a_successful_log_in_resets_the_accounts_count() -> None:
    user: Any = UserFactory()
    for _round in range(3):
        for n in range(4):
            _login(Client(REMOTE_ADDR="203.0.113.7"), "/accounts/login/", user.username, f"typo {n}")
        assert _login(Client(REMOTE_ADDR="203.0.113.7"), "/accounts/login/", user.username, PASSWORD).status_code == 302


def test_the_log_in_form_is_still_shown_to_a_locked_out_address() -> None:
    user: Any = UserFactory()
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for n in range(5):
        _login(attacker, "/accounts/login/", user.username, f"guess {n}")
    assert attacker.get("/accounts/login/").status_code == 200


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_after_the_window_the_right_password_works_again(page: str, settings: Any) -> None:
    settings.CORDON_AUTH_THROTTLE_WINDOW_S = 2
    user: Any = UserFactory(is_staff=True)
    client = Client(REMOTE_ADDR="203.0.113.7")
    for n in range(5):
        _login(client, page, user.username, f"guess {n}")
    refused = _login(client, page, user.username, PASSWORD)
    assert refused.status_code == 429
    time.sleep(int(refused["Retry-After"]) + 0.3)
    assert _login(client, page, user.username, PASSWORD).status_code == 302


def test_an_unreachable_throttle_store_throttles_nobody(settings: Any) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "throttle": {**settings.CACHES["throttle"], "LOCATION": "redis://127.0.0.1:1/0"},
    }
    user: Any = UserFactory()
    client = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer cdn_bad")
    assert {client.get("/api/runs").status_code for _ in range(25)} == {401}
    for n in range(6):
        _login(client, "/accounts/login/", user.username, f"guess {n}")
    assert _login(client, "/accounts/login/", user.username, PASSWORD).status_code == 302
