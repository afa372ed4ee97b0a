"""The provider as configured (CORDON_OIDC_*) and as it describes itself (its discovery document),
and the one refusal every step of a sign-in raises."""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings

from runner.env import ConfigError

HTTP_TIMEOUT_S = 10  # discovery, the code exchange, the keys, userinfo: each request
DISCOVERY_TTL_S = 3600  # a provider's endpoints and keys change rarely; a restart is not needed after
SIGN_ALGOS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")


class SsoRefused(Exception):
    """A sign-in refused: `code` is stable (logs, tests), `message` is for the person."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def secure_url(url: str) -> bool:
    """https, or http on loopback only (a provider run beside the site, as in the tests)."""
    scheme = urlsplit(url).scheme
    return scheme == "https" or (scheme == "http" and _loopback(url))


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_sso_settings(
    *, issuer: str, client_id: str, client_secret: str, sign_algo: str, password_login: bool
) -> None:
    """At start-up: a malformed SSO configuration stops it, naming the variable."""
    if not issuer:
        if not password_login:
            raise ConfigError("CORDON_PASSWORD_LOGIN=false needs CORDON_OIDC_ISSUER: nobody could log in")
        return
    parts = urlsplit(issuer)
    if not secure_url(issuer):
        raise ConfigError(f"CORDON_OIDC_ISSUER must be an https:// URL (http:// only on loopback); got {issuer!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"CORDON_OIDC_ISSUER must have no query or fragment; got {issuer!r}")
    if not client_id or not client_secret:
        raise ConfigError("CORDON_OIDC_ISSUER needs CORDON_OIDC_CLIENT_ID and CORDON_OIDC_CLIENT_SECRET")
    if sign_algo not in SIGN_ALGOS:
        raise ConfigError(f"CORDON_OIDC_SIGN_ALGO must be one of {', '.join(SIGN_ALGOS)}; got {sign_algo!r}")


@dataclass(frozen=True)
class SsoConfig:
    issuer: str
    client_id: str
    client_secret: str
    provider_name: str
    scopes: str
    sign_algo: str
    username_claim: str
    groups_claim: str
    staff_groups: frozenset[str]
    superuser_groups: frozenset[str]
    instructor_groups: frozenset[str]


def sso_config() -> SsoConfig | None:
    """The configured provider; None when single sign-on is off."""
    if not settings.CORDON_OIDC_ISSUER:
        return None
    return SsoConfig(
        issuer=settings.CORDON_OIDC_ISSUER,
        client_id=settings.CORDON_OIDC_CLIENT_ID,
        client_secret=settings.CORDON_OIDC_CLIENT_SECRET,
        provider_name=settings.CORDON_OIDC_PROVIDER_NAME,
        scopes=settings.CORDON_OIDC_SCOPES,
        sign_algo=settings.CORDON_OIDC_SIGN_ALGO,
        username_claim=settings.CORDON_OIDC_USERNAME_CLAIM,
        groups_claim=settings.CORDON_OIDC_GROUPS_CLAIM,
        staff_groups=frozenset(settings.CORDON_OIDC_STAFF_GROUPS),
        superuser_groups=frozenset(settings.CORDON_OIDC_SUPERUSER_GROUPS),
        instructor_groups=frozenset(settings.CORDON_OIDC_INSTRUCTOR_GROUPS),
    )


def password_login() -> bool:
    return bool(settings.CORDON_PASSWORD_LOGIN)


@dataclass(frozen=True)
class Endpoints:
    """What the provider's discovery document says, its issuer checked against the configured one."""

    authorization: str
    token: str
    jwks: str
    userinfo: str  # "" when it has none: the ID token's claims are all there is
    end_session: str = ""  # RP-initiated logout; "" when it has none: a log-out is Cordon's only


_discovered: dict[str, tuple[float, Endpoints]] = {}
_discovered_lock = threading.Lock()


def endpoints(issuer: str) -> Endpoints:
    """The issuer's endpoints, from `<issuer>/.well-known/openid-configuration` (kept an hour)."""
    now = time.monotonic()
    with _discovered_lock:
        kept = _discovered.get(issuer)
    if kept is not None and now - kept[0] < DISCOVERY_TTL_S:
        return kept[1]
    found = _discover(issuer)
    with _discovered_lock:
        _discovered[issuer] = (now, found)
    return found


def _discover(issuer: str) -> Endpoints:
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        document: dict[str, Any] = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SsoRefused("provider_unreachable", f"the sign-in provider could not be reached ({exc})") from exc
    if not isinstance(document, dict):
        raise SsoRefused("provider_misconfigured", f"the provider's discovery document at {url} is not an object")
    if document.get("issuer") != issuer:
        # OpenID Connect Discovery 4.3: the document's issuer is exactly the one asked for; another
        # one means the configuration points at a provider that is not the configured issuer.
        raise SsoRefused(
            "unknown_issuer",
            f"the provider at {url} says its issuer is {document.get('issuer')!r}, not the configured {issuer!r}",
        )
    try:
        return Endpoints(
            authorization=str(document["authorization_endpoint"]),
            token=str(document["token_endpoint"]),
            jwks=str(document["jwks_uri"]),
            userinfo=str(document.get("userinfo_endpoint") or ""),
            end_session=str(document.get("end_session_endpoint") or ""),
        )
    except KeyError as exc:
        raise SsoRefused("provider_misconfigured", f"the provider's discovery document has no {exc}") from exc
