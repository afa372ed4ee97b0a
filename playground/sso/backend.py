"""The authentication backend of a sign-in's return: the code exchanged (with its PKCE verifier), the
ID token checked (signature, issuer, audience, expiry, nonce), the claims gathered, the account found.

mozilla-django-oidc's backend does the exchange and fetches the keys and userinfo; it checks neither
the ID token's issuer nor its audience (it decodes with verify_aud off), so `_verify_jws` does it all.
Its settings come from CORDON_OIDC_* and the provider's discovery document, not from OIDC_* settings.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from django.urls import reverse
from django.utils.crypto import constant_time_compare
from mozilla_django_oidc.auth import OIDCAuthenticationBackend  # type: ignore[import-untyped]
from mozilla_django_oidc.utils import import_from_settings  # type: ignore[import-untyped]

from playground.sso.accounts import sso_sign_in
from playground.sso.config import HTTP_TIMEOUT_S, SsoRefused, endpoints, sso_config

log = logging.getLogger(__name__)

CLOCK_SKEW_S = 60  # between this host and the provider, on the ID token's exp and iat

# The library's settings this site answers itself (everything else: Django's settings, or the default).
_FIXED = {
    "OIDC_USE_PKCE": True,
    "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
    "OIDC_USE_NONCE": True,
    "OIDC_TIMEOUT": HTTP_TIMEOUT_S,
    "OIDC_VERIFY_SSL": True,
    "OIDC_STORE_ID_TOKEN": False,
    "OIDC_STORE_ACCESS_TOKEN": False,
    "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
}


def library_setting(attr: str, *default: Any) -> Any:
    """What mozilla-django-oidc asks its settings for, answered from CORDON_OIDC_* and discovery."""
    config = sso_config()
    if config is None:
        raise SsoRefused("sso_off", "single sign-on is not configured on this site")
    if attr in _FIXED:
        return _FIXED[attr]
    by_config = {"OIDC_RP_CLIENT_ID": config.client_id, "OIDC_RP_CLIENT_SECRET": config.client_secret,
                 "OIDC_RP_SCOPES": config.scopes, "OIDC_RP_SIGN_ALGO": config.sign_algo}  # fmt: skip
    if attr in by_config:
        return by_config[attr]
    if attr.startswith("OIDC_OP_"):
        found = endpoints(config.issuer)
        by_discovery = {"OIDC_OP_AUTHORIZATION_ENDPOINT": found.authorization, "OIDC_OP_TOKEN_ENDPOINT": found.token,
                        "OIDC_OP_JWKS_ENDPOINT": found.jwks, "OIDC_OP_USER_ENDPOINT": found.userinfo}  # fmt: skip
        if attr in by_discovery:
            return by_discovery[attr]
    return import_from_settings(attr, *default)


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """Answers only the callback view's authenticate() (its keyword arguments), never a password."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__, which reads the endpoints: Django makes a backend for every
        # request of a signed-in user (get_user), and those must not depend on the provider.
        self.UserModel = User
        self.id_token = ""  # the raw ID token of the sign-in authenticate() accepted

    get_settings = staticmethod(library_setting)

    def get_user(self, user_id: int) -> User | None:
        # ModelBackend's, which refuses a deactivated account (the library's does not).
        return ModelBackend.get_user(self, user_id)

    def authenticate(self, request: HttpRequest | None, *, oidc_nonce: str, oidc_code_verifier: str) -> User | None:
        config = sso_config()
        if request is None or config is None:
            return None
        self.request = request
        self.config = config
        found = endpoints(config.issuer)
        self.OIDC_OP_TOKEN_ENDPOINT = found.token
        self.OIDC_OP_USER_ENDPOINT = found.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks
        self.OIDC_RP_CLIENT_ID = config.client_id
        self.OIDC_RP_CLIENT_SECRET = config.client_secret
        self.OIDC_RP_SIGN_ALGO = config.sign_algo
        self.OIDC_RP_IDP_SIGN_KEY = None
        tokens = self._exchange(request.GET.get("code", ""), oidc_code_verifier)
        try:
            id_claims = self.verify_token(tokens["id_token"], nonce=oidc_nonce)
        except (KeyError, TypeError) as exc:
            raise SsoRefused("bad_token_response", "the provider's answer held no ID token") from exc
        self.id_token = str(tokens["id_token"])  # for the log-out's id_token_hint (views.Logout)
        claims = self._claims(str(tokens.get("access_token") or ""), id_claims)
        return sso_sign_in(config=config, claims=claims)

    def _exchange(self, code: str, code_verifier: str) -> dict[str, Any]:
        payload = {
            "client_id": self.config.client_id,
            "client_secret": self.config.client_secret,
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.request.build_absolute_uri(reverse("oidc_authentication_callback")),
            "code_verifier": code_verifier,
        }
        try:
            answer: dict[str, Any] = self.get_token(payload)
        except requests.HTTPError as exc:
            error = _oauth_error(exc.response)
            if error == "invalid_grant":
                raise SsoRefused(
                    "code_refused",
                    "the provider refused this sign-in's code (expired, used already, or not issued for this "
                    "sign-in); sign in again",
                ) from exc
            raise SsoRefused("provider_error", f"the provider refused the code exchange ({error})") from exc
        except (requests.RequestException, ValueError) as exc:
            raise SsoRefused("provider_unreachable", f"the sign-in provider could not be reached ({exc})") from exc
        return answer

    def _verify_jws(self, payload: str, key: Any) -> dict[str, Any]:
        """The signature with the configured algorithm, then the issuer, audience and lifetime."""
        try:
            header = jwt.get_unverified_header(payload)
        except jwt.PyJWTError as exc:
            raise SsoRefused("bad_id_token", f"the ID token is not a JWT ({exc})") from exc
        if header.get("alg") != self.config.sign_algo:
            raise SsoRefused("bad_id_token", f"the ID token is signed with {header.get('alg')!r}, "
                             f"not the configured {self.config.sign_algo}")  # fmt: skip
        try:
            claims: dict[str, Any] = jwt.decode(
                payload, key, algorithms=[self.config.sign_algo], audience=self.config.client_id,
                issuer=self.config.issuer, leeway=CLOCK_SKEW_S, options={"require": ["iss", "aud", "exp", "iat"]},
            )  # fmt: skip
        except jwt.InvalidIssuerError as exc:
            issuer = jwt.decode(payload, options={"verify_signature": False}).get("iss")
            raise SsoRefused(
                "unknown_issuer", f"the ID token was issued by {issuer!r}, not the configured {self.config.issuer!r}"
            ) from exc
        except jwt.InvalidAudienceError as exc:
            raise SsoRefused("wrong_audience", "the ID token was not issued to this site") from exc
        except jwt.ExpiredSignatureError as exc:
            raise SsoRefused("expired_id_token", "the ID token has expired") from exc
        except jwt.PyJWTError as exc:
            raise SsoRefused("bad_id_token", f"the ID token failed its checks ({exc})") from exc
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise SsoRefused("wrong_audience", "the ID token was issued to another party (azp)")
        return claims

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        try:
            key = self.retrieve_matching_jwk(token)
        except (SuspiciousOperation, KeyError, jwt.PyJWTError) as exc:  # no key of the provider's fits
            raise SsoRefused("bad_id_token", "the ID token is not signed by a key of the provider") from exc
        except (requests.RequestException, ValueError) as exc:
            raise SsoRefused("provider_unreachable", f"the provider's keys could not be fetched ({exc})") from exc
        claims = self._verify_jws(token, key)
        if "nonce" in kwargs and not constant_time_compare(str(claims.get("nonce") or ""), kwargs["nonce"] or ""):
            raise SsoRefused("wrong_nonce", "the ID token was not issued for this sign-in (its nonce differs)")
        return claims

    def _claims(self, access_token: str, id_claims: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims, with what userinfo adds (Keycloak and oidc-provider put the profile
        and groups there; Entra puts groups in the ID token only). The ID token's win."""
        if not self.OIDC_OP_USER_ENDPOINT or not access_token:
            return id_claims
        try:
            userinfo = self.get_userinfo(access_token, None, id_claims)
        except (requests.RequestException, ValueError) as exc:
            raise SsoRefused("provider_unreachable", f"the provider's userinfo could not be fetched ({exc})") from exc
        if not isinstance(userinfo, dict) or userinfo.get("sub") != id_claims.get("sub"):
            # OpenID Connect Core 5.3.2: userinfo of another subject must not be used.
            raise SsoRefused("subject_mismatch", "the provider's userinfo is about someone else")
        return {**userinfo, **id_claims}


def _oauth_error(response: requests.Response | None) -> str:
    if response is None:
        return "no answer"
    try:
        return str(response.json().get("error") or response.status_code)
    except ValueError:
        return str(response.status_code)
