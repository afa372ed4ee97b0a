"""The sign-in's two ends: the start (state, nonce and PKCE verifier kept in the session, the browser
sent to the provider) and the return (every check; a refusal is a page saying why and a log line)."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.views import LogoutView
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from mozilla_django_oidc.views import OIDCAuthenticationRequestView  # type: ignore[import-untyped]

from playground import throttle
from playground.sso.backend import OidcBackend, library_setting
from playground.sso.config import SsoConfig, SsoRefused, endpoints, secure_url, sso_config

log = logging.getLogger(__name__)

# How long a started sign-in may take at the provider (a password and a second factor) before its
# return is refused; its state is dropped from the session either way once used.
SIGN_IN_MAX_S = 900
BACKEND = "playground.sso.backend.OidcBackend"
LOGOUT_HINT = "oidc_id_token"  # in the session: the provider's ID token of this sign-in, the log-out's hint


class _Start(OIDCAuthenticationRequestView):  # type: ignore[misc]
    get_settings = staticmethod(library_setting)


@never_cache
@require_GET
def start(request: HttpRequest) -> HttpResponseBase:
    config = _config()
    try:
        response: HttpResponseBase = _Start.as_view()(request)
    except SsoRefused as exc:
        return _refused(request, config, exc)
    return response


@never_cache
@require_GET
def callback(request: HttpRequest) -> HttpResponseBase:
    """Where the provider sends the browser back. Refusals count as failed log-ins against the
    address (playground/throttle.py), and a locked-out address is refused before anything is checked."""
    config = _config()
    subjects = [throttle.address_subject(throttle.client_address(request))]
    wait_s = throttle.retry_after_s(subjects)
    if wait_s is not None:
        return throttle.throttled_page(
            request, wait_s, heading="Too many failed sign-ins",
            explanation="There have been too many failed sign-ins or log-ins from your address, so they are "
            "refused for now.",
        )  # fmt: skip
    backend = OidcBackend()
    try:
        pending = _pending_sign_in(request, config)
        user = backend.authenticate(request, oidc_nonce=pending["nonce"], oidc_code_verifier=pending["code_verifier"])
    except SsoRefused as exc:
        if exc.code != "provider_unreachable":
            throttle.record_failure(subjects)
        return _refused(request, config, exc)
    if user is None:  # only when single sign-on was turned off in between
        raise Http404("single sign-on is not configured on this site")
    login(request, user, backend=BACKEND)
    request.session[LOGOUT_HINT] = backend.id_token  # after login(), which may start a new session
    return redirect(request.session.pop("oidc_login_next", None) or settings.LOGIN_REDIRECT_URL)


class Logout(LogoutView):
    """Cordon's log-out. After signing in through the provider it also ends the provider's session
    (OpenID Connect RP-Initiated Logout): a page sends the browser on to its end-session endpoint,
    which comes back to the log-in page (the post-logout redirect URI registered at the provider).
    A page, not a redirect: the form that posts here may only lead to this site (CSP form-action
    'self', which browsers apply to a form's redirects too). Without that endpoint, or after a
    password log-in, the log-out is Cordon's alone, as before."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        hint = request.session.get(LOGOUT_HINT)  # read before the log-out clears the session
        response: HttpResponse = super().post(request, *args, **kwargs)  # Cordon's, whatever the provider does
        config = sso_config()
        if not hint or config is None:
            return response
        try:
            ending = _provider_log_out(request, config, str(hint))
        except Exception:  # the provider's discovery unreadable, say: logged out of Cordon all the same
            log.warning("sso: log-out at the provider skipped", exc_info=True)
            return response
        if not ending:
            return response
        return render(request, "registration/logged_out_sso.html", {"url": ending, "provider": config.provider_name})


def _provider_log_out(request: HttpRequest, config: SsoConfig, hint: str) -> str:
    """The provider's end-session URL for a sign-in whose ID token is `hint`, or "" (the provider
    has no end-session endpoint, is unreachable, or names one that is not https: then only Cordon
    logs out)."""
    try:
        end_session = endpoints(config.issuer).end_session
    except SsoRefused as exc:
        log.warning("sso: log-out at the provider skipped (%s): %s", exc.code, exc.message)
        return ""
    if not end_session:
        return ""
    parts = urlsplit(end_session)
    if not parts.netloc or not secure_url(end_session):
        log.warning("sso: log-out at the provider skipped: its end_session_endpoint %r is not https", end_session)
        return ""
    query = [*parse_qsl(parts.query), ("id_token_hint", hint), ("client_id", config.client_id),
             ("post_logout_redirect_uri", request.build_absolute_uri(reverse("login")))]  # fmt: skip
    return urlunsplit(parts._replace(query=urlencode(query), fragment=""))


def _config() -> SsoConfig:
    config = sso_config()
    if config is None:
        raise Http404("single sign-on is not configured on this site")
    return config


def _pending_sign_in(request: HttpRequest, config: SsoConfig) -> dict[str, Any]:
    """The sign-in this return belongs to, taken out of the session (a state is used once)."""
    if request.GET.get("error"):
        _take_state(request)
        error = request.GET["error"]
        description = request.GET.get("error_description", "")[:200]
        raise SsoRefused("provider_error", f"{config.provider_name} did not sign you in: {error} {description}".strip())
    if not request.GET.get("code") or not request.GET.get("state"):
        raise SsoRefused("wrong_state", "this address is not a sign-in's return (no code or state)")
    pending = _take_state(request)
    if pending is None:
        raise SsoRefused(
            "wrong_state",
            "this sign-in was not started in this browser, or its return was used already; sign in again",
        )
    if time.time() - float(pending.get("added_on", 0)) > SIGN_IN_MAX_S:
        raise SsoRefused("expired_state", "this sign-in took too long; sign in again")
    # RFC 9207: a provider that names itself in its answer must be the configured one (a mix-up).
    if "iss" in request.GET and request.GET["iss"] != config.issuer:
        raise SsoRefused(
            "unknown_issuer", f"the answer came from {request.GET['iss']!r}, not the configured {config.issuer!r}"
        )
    return pending


def _take_state(request: HttpRequest) -> dict[str, Any] | None:
    states = request.session.get("oidc_states")
    if not isinstance(states, dict):
        return None
    found = states.pop(request.GET.get("state", ""), None)
    request.session.modified = True
    return found if isinstance(found, dict) else None


def _refused(request: HttpRequest, config: SsoConfig, exc: SsoRefused) -> HttpResponse:
    log.warning("sso: sign-in refused (%s) from %s: %s", exc.code, throttle.client_address(request), exc.message)
    status = 502 if exc.code in ("provider_unreachable", "provider_misconfigured") else 403
    context = {"message": exc.message, "code": exc.code, "provider": config.provider_name}
    return render(request, "registration/sso_refused.html", context, status=status)
