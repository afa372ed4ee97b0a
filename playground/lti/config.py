"""What pylti1p3 asks of its host: the registrations (Platform rows, signed with the site's key),
and where a launch's login state is kept between the OIDC login and the launch.

Where the state lives, and why. pylti1p3 keeps two things between the login request and the launch:
a `state` cookie, and the `nonce` (with the state's parameters) in a session store. Its default
store is Django's session, whose cookie is SameSite=Lax: a browser drops it on the LMS's cross-site
form POST to the launch URL, so the nonce would never be found in production. Its cache store keys
by a cookie of its own, but the default cache here is per process (locmem), and several web
processes serve one site. So the store is the database (LaunchState rows, short-lived), keyed by
pylti1p3's own `lti1p3-session-id` cookie, which pylti1p3 sets (like the state cookie) with
SameSite=None; Secure when the request is HTTPS (request.is_secure(): behind the TLS proxy,
SECURE_PROXY_SSL_HEADER makes it so), and with no SameSite attribute on plain http, where browsers
treat it as Lax: the tests' loopback LMS and Cordon differ only by port, which is the same site, so
the POST carries it. A nonce is consumed when it is checked (a conditional DELETE), so a launch
replayed, even with the same cookies, is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from pylti1p3.deployment import Deployment
from pylti1p3.launch_data_storage.base import LaunchDataStorage
from pylti1p3.registration import Registration
from pylti1p3.tool_config.abstract import ToolConfAbstract

from playground.lti.keys import signing_key
from playground.lti.models import LaunchState, Platform

STATE_LIFETIME_S = 600  # from the OIDC login to the launch; a person at an LMS is quicker


def platform_for(iss: str, client_id: str | None) -> Platform | None:
    """The active registration of this issuer and client id; without a client id (an LMS may leave
    it out of the login request), the issuer's only one."""
    platforms = Platform.objects.filter(issuer=iss, active=True)
    if client_id:
        return platforms.filter(client_id=client_id).first()
    found = list(platforms[:2])
    return found[0] if len(found) == 1 else None


def registration_for(platform: Platform) -> Registration:
    key = signing_key()
    return (
        Registration()
        .set_issuer(platform.issuer)
        .set_client_id(platform.client_id)
        .set_key_set_url(platform.keyset_url)
        .set_auth_login_url(platform.auth_login_url)
        .set_auth_token_url(platform.auth_token_url)
        .set_auth_audience(platform.auth_audience or platform.auth_token_url)
        .set_tool_private_key(key.private_key_pem)
        .set_tool_public_key(key.public_key_pem)
    )


class ToolConf(ToolConfAbstract):  # type: ignore[type-arg]
    """Registrations from the Platform rows staff keep in the console; many client ids per issuer."""

    def check_iss_has_one_client(self, iss: str) -> bool:
        return False

    def check_iss_has_many_clients(self, iss: str) -> bool:
        return True

    def find_registration_by_issuer(self, iss: str, *args: Any, **kwargs: Any) -> Registration | None:  # type: ignore[override]
        platform = platform_for(iss, None)
        return None if platform is None else registration_for(platform)

    def find_registration_by_params(  # type: ignore[override]
        self, iss: str, client_id: str, *args: Any, **kwargs: Any
    ) -> Registration | None:
        platform = platform_for(iss, client_id)
        return None if platform is None else registration_for(platform)

    def find_deployment(self, iss: str, deployment_id: str) -> Deployment | None:
        return self.find_deployment_by_params(iss, deployment_id, "")

    def find_deployment_by_params(
        self, iss: str, deployment_id: str, client_id: str, *args: Any, **kwargs: Any
    ) -> Deployment | None:
        platform = platform_for(iss, client_id or None)
        if platform is None or deployment_id not in platform.deployments():
            return None
        return Deployment().set_deployment_id(deployment_id)


class LaunchStore(LaunchDataStorage[Any]):
    """pylti1p3's session store, in LaunchState rows (see the module's docstring)."""

    def get_session_cookie_name(self) -> str | None:
        return self._session_cookie_name  # on http too (pylti1p3's cache store drops it there)

    def can_set_keys_expiration(self) -> bool:
        return True

    def get_value(self, key: str) -> Any:
        row = LaunchState.objects.filter(key=self._prepare_key(key), expires_at__gt=timezone.now()).first()
        return None if row is None else row.value

    def set_value(self, key: str, value: Any, exp: int | None = None) -> None:
        now = timezone.now()
        lifetime = min(exp or STATE_LIFETIME_S, STATE_LIFETIME_S)
        LaunchState.objects.filter(expires_at__lte=now).delete()  # the sweep: indexed, and usually nothing
        LaunchState.objects.update_or_create(
            key=self._prepare_key(key), defaults={"value": value, "expires_at": now + timedelta(seconds=lifetime)}
        )

    def check_value(self, key: str) -> bool:
        """A nonce is checked once: the check consumes it (whoever deletes the row owns the launch)."""
        prepared = self._prepare_key(key)
        live = Q(key=prepared, expires_at__gt=timezone.now())
        if "-nonce-" in prepared:
            deleted, _ = LaunchState.objects.filter(live).delete()
            return deleted > 0
        return LaunchState.objects.filter(live).exists()
