"""Throttles: failed authentication (wrong passwords on the log-in pages, unknown bearer tokens),
wrong join codes, and the rate of submissions.

Failures are counted per client address and per account (or user) in the `throttle` cache (Redis,
shared by every web process on every host). A subject that reaches its limit within the window is
refused for one window, with 429 and Retry-After, before any credential or code is checked. Rates
are counted in windows of a minute from a subject's first event: past the limit, 429 until the
window ends.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import BaseCache, caches
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render

from playground.metrics import count_throttled

log = logging.getLogger(__name__)

CACHE_ALIAS = "throttle"


class AuthThrottled(Exception):
    """Too many failed authentications from this address or for this account; try again later."""

    def __init__(self, retry_after_s: int):
        self.retry_after_s = retry_after_s
        self.message = (
            f"too many failed authentication attempts from this address; try again in {retry_after_s} seconds"
        )
        super().__init__(self.message)


@dataclass(frozen=True)
class Subject:
    """What failures are counted against (one address or one account), how many it may have, and
    the window they are counted in (and it is refused for, once it has them all)."""

    key: str
    limit: int
    window_s: int = 0  # 0: CORDON_AUTH_THROTTLE_WINDOW_S

    @property
    def window(self) -> int:
        return self.window_s or int(settings.CORDON_AUTH_THROTTLE_WINDOW_S)


def client_address(request: HttpRequest) -> str:
    """The address failures are counted against.

    REMOTE_ADDR only: X-Forwarded-For is whatever the client wrote, until a setting says which proxy
    in front is trusted. An IPv6 client is counted by its /64, which one host usually holds whole.
    """
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "")
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def address_subject(address: str) -> Subject:
    return Subject(f"address:{address}", settings.CORDON_AUTH_FAILURES_PER_ADDRESS)


# Django's log-in form refuses a name longer than this once stripped (User.username's length), before
# it normalises it: such a name is no account's, so no more of a POSTed one (up to the 4 MiB body
# cap) is normalised here either.
ACCOUNT_NAME_MAX_CHARS = 150


def account_subject(username: str) -> Subject:
    # Canonical as the log-in form makes it (stripped, NFKC), and case-folded so that "Alice" and
    # "alice" share one count. Hashed: the store holds no user names and the key stays printable.
    canonical = unicodedata.normalize("NFKC", username.strip()[:ACCOUNT_NAME_MAX_CHARS]).strip().casefold()
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return Subject(f"account:{digest}", settings.CORDON_AUTH_FAILURES_PER_ACCOUNT)


def _cache() -> BaseCache:
    return caches[CACHE_ALIAS]


def _lock_key(subject: Subject) -> str:
    return f"lock:{subject.key}"


def _count_key(subject: Subject) -> str:
    return f"count:{subject.key}"


def retry_after_s(subjects: list[Subject]) -> int | None:
    """Seconds until every one of these subjects may try again; None when none is locked out.

    An unreachable store locks nobody out: a Redis outage must not become an outage of every
    log-in and every API client. It is logged, and counting resumes when Redis is back.
    """
    try:
        locked_until = _cache().get_many([_lock_key(s) for s in subjects])
    except redis.RedisError as exc:
        log.warning("auth throttle: the throttle store is unreachable, not throttling: %s", exc)
        return None
    now = time.time()
    return max((max(1, math.ceil(until - now)) for until in locked_until.values()), default=None)


def record_failure(subjects: list[Subject]) -> None:
    """Count one failure against each subject; one that reaches its limit is locked out for a window."""
    cache = _cache()
    try:
        for subject in subjects:
            if _increment(cache, _count_key(subject), subject.window) >= subject.limit:
                cache.set(_lock_key(subject), time.time() + subject.window, timeout=subject.window)
    except redis.RedisError as exc:
        log.warning("auth throttle: the throttle store is unreachable, failure not counted: %s", exc)


def _increment(cache: BaseCache, key: str, window_s: int) -> int:
    # The window starts at the first failure; add() and incr() are atomic in Redis, so processes
    # counting at once never lose a failure.
    if cache.add(key, 1, timeout=window_s):
        return 1
    try:
        return int(cache.incr(key))
    except ValueError:  # the window ended between add() and incr()
        cache.add(key, 1, timeout=window_s)
        return 1


def reset(subject: Subject) -> None:
    try:
        _cache().delete(_count_key(subject))
    except redis.RedisError as exc:
        log.warning("auth throttle: the throttle store is unreachable, count not reset: %s", exc)


# --- bearer tokens -------------------------------------------------------------------------------
# Counted per address only. A token is 32 random bytes, so guessing one is hopeless and an account
# lock would protect nothing; it would only let anyone who saw a token's prefix (shown on the
# account page and in the admin) lock its owner's API clients out.


def check_token_address(request: HttpRequest) -> None:
    """Raise AuthThrottled when this address is locked out, before any token is looked up."""
    wait_s = retry_after_s([address_subject(client_address(request))])
    if wait_s is not None:
        count_throttled("token_address")
        raise AuthThrottled(wait_s)


def token_failed(request: HttpRequest) -> None:
    record_failure([address_subject(client_address(request))])


# --- log-in pages --------------------------------------------------------------------------------


def _login_subjects(request: HttpRequest, username: str) -> list[Subject]:
    return [address_subject(client_address(request)), account_subject(username)]


def throttled_login(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Wrap a log-in view: a POST from a locked-out address, or for a locked-out account, is
    answered 429 without checking the password (so the right one is refused too)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            username = request.POST.get(get_user_model().USERNAME_FIELD, "")
            wait_s = retry_after_s(_login_subjects(request, username))
            if wait_s is not None:
                count_throttled("login")
                return _throttled_page(request, wait_s)
        return view(request, *args, **kwargs)

    return wrapped


def _throttled_page(request: HttpRequest, wait_s: int, **context: str) -> HttpResponse:
    response = render(request, "registration/throttled.html", {"wait": _wait_words(wait_s), **context}, status=429)
    response["Retry-After"] = str(wait_s)
    return response


def throttled_page(request: HttpRequest, wait_s: int, *, heading: str, explanation: str) -> HttpResponse:
    """The 429 page, for a throttle other than the log-in's."""
    return _throttled_page(request, wait_s, heading=heading, explanation=explanation)


# Receivers of django.contrib.auth's signals, connected in PlaygroundConfig.ready(). Only logins
# submitted through a form count: force_login() and the test client's login() pass no request or a
# bare one whose method is None.


def login_failed(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any) -> None:
    if request is None or request.method != "POST":
        return
    username = str(credentials.get(get_user_model().USERNAME_FIELD, ""))
    record_failure(_login_subjects(request, username))


def logged_in(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    # Only the account's count: resetting the address's would let an attacker with one account of
    # their own wipe their count between guesses at others.
    if request is None or request.method != "POST":
        return
    reset(account_subject(user.get_username()))


# --- join codes ----------------------------------------------------------------------------------
# A join code is 8 characters of 32, handed out in a classroom: wrong ones are counted per user and
# per address (a class behind one address joins with the right code, which is not counted), on the
# API and on the join page alike, so that nobody can try codes until one opens a course.


def join_subjects(request: HttpRequest) -> list[Subject]:
    window = int(settings.CORDON_JOIN_THROTTLE_WINDOW_S)
    return [
        Subject(f"join-user:{request.user.pk}", settings.CORDON_JOIN_FAILURES_PER_USER, window),
        Subject(f"join-address:{client_address(request)}", settings.CORDON_JOIN_FAILURES_PER_ADDRESS, window),
    ]


def join_wait_s(request: HttpRequest) -> int | None:
    """Seconds until this user and address may try a join code again; None when they may now."""
    wait_s = retry_after_s(join_subjects(request))
    if wait_s is not None:
        count_throttled("join")
    return wait_s


def join_failed(request: HttpRequest) -> None:
    record_failure(join_subjects(request))


def join_refusal(wait_s: int) -> str:
    return f"too many wrong join codes from this account or address; try again in {_wait_words(wait_s)}"


# --- rates ---------------------------------------------------------------------------------------


def rate_wait_s(key: str, limit: int, window_s: int = 60) -> int | None:
    """Count one event against `key` in its window (which starts at its first event and lasts
    `window_s`); past `limit` in it, the seconds until the window ends (None while within it, or
    when the store is unreachable)."""
    now = time.time()
    cache = _cache()
    try:
        cache.add(f"rate-start:{key}", now, timeout=window_s)
        count = _increment(cache, f"rate:{key}", window_s)
        started = float(cache.get(f"rate-start:{key}") or now) if count > limit else now
    except redis.RedisError as exc:
        log.warning("rate limit: the throttle store is unreachable, not limiting: %s", exc)
        return None
    if count <= limit:
        return None
    count_throttled(key.split(":", 1)[0])  # the rate's name ("submit"), not its subject
    return max(1, math.ceil(started + window_s - now))


def _wait_words(wait_s: int) -> str:
    return f"{wait_s} seconds" if wait_s < 120 else f"{math.ceil(wait_s / 60)} minutes"
