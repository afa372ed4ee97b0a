"""Who may frame Cordon's Deep Linking picker: the launching LMS's origins, named in the CSP of the
picker's responses (and of no other page, which keep X-Frame-Options DENY and frame-ancestors 'none')."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from django.http import HttpResponse

from playground.lti.models import Platform
from playground.security import CSP

# A serialised origin and nothing else: no path, no credentials, no CSP separator can get through.
_ORIGIN = re.compile(r"^https?://(?:[a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")


def origin_of(url: str) -> str | None:
    """The origin of an http(s) URL (scheme, host, port), or None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        return None
    origin = f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{'' if port is None else f':{port}'}"
    return origin if _ORIGIN.match(origin) else None


def lms_origins(*, platform: Platform, return_url: str) -> list[str]:
    """The LMS's origins: its issuer's and its authorization URL's (Moodle's pages are on them), and
    its deep-linking return URL's, which the LMS signed into the launch: hosted Canvas's issuer and
    authorization URL are Instructure's, while its pages (and the return URL) are on the school's
    own domain. Never a wildcard: a URL that has no plain origin adds nothing."""
    found = (origin_of(url) for url in (platform.issuer, platform.auth_login_url, return_url))
    return list(dict.fromkeys(origin for origin in found if origin))


def framable(response: HttpResponse, *, origins: Sequence[str], form_to: Sequence[str] = ()) -> HttpResponse:
    """The response may be framed by these origins only (none: by nobody, as every other page), and
    its forms may also go to `form_to`."""
    policy = CSP
    if form_to:
        policy = policy.replace("form-action 'self'", " ".join(["form-action 'self'", *form_to]))
    if origins:
        policy = policy.replace("frame-ancestors 'none'", " ".join(["frame-ancestors", *origins]))
        response.xframe_options_exempt = True  # as django's @xframe_options_exempt: no X-Frame-Options
    response["Content-Security-Policy"] = policy
    return response
