"""The origins that may frame the Deep Linking picker: plain origins of the LMS's own URLs, never a
wildcard, a path, credentials or anything that could break out of the CSP header."""

from __future__ import annotations

import pytest

from playground.lti.framing import lms_origins, origin_of
from playground.lti.models import Platform


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://moodle.school.edu/mod/lti/auth.php", "https://moodle.school.edu"),
        ("https://School.Instructure.com:443/courses/1/deep_linking_response?modal=true", "https://school.instructure.com:443"),
        ("http://127.0.0.1:8123/auth", "http://127.0.0.1:8123"),
        ("https://user:secret@lms.example.org/x", "https://lms.example.org"),
        ("https://[2001:db8::1]:8443/x", "https://[2001:db8::1]:8443"),
        ("*", None),
        ("https://*.instructure.com", None),
        ("https://lms.example.org;script-src *", None),
        ("https://lms.example.org 'unsafe-inline'", None),
        ("javascript:alert(1)", None),
        ("ftp://lms.example.org", None),
        ("https://lms.example.org:99999/", None),
        ("", None),
    ],
)  # fmt: skip
def test_an_origin_is_a_plain_http_origin_or_nothing(url: str, origin: str | None) -> None:
    assert origin_of(url) == origin


def test_hosted_canvas_frames_from_the_schools_domain_named_by_its_signed_return_url() -> None:
    canvas = Platform(
        issuer="https://canvas.instructure.com", auth_login_url="https://sso.canvaslms.com/api/lti/authorize_redirect"
    )
    origins = lms_origins(platform=canvas, return_url="https://school.instructure.com/courses/1/deep_linking_response")
    assert origins == [
        "https://canvas.instructure.com", "https://sso.canvaslms.com", "https://school.instructure.com"
    ]  # fmt: skip
    moodle = Platform(issuer="https://moodle.school.edu", auth_login_url="https://moodle.school.edu/mod/lti/auth.php")
    assert lms_origins(platform=moodle, return_url="https://moodle.school.edu/mod/lti/contentitem_return.php") == [
        "https://moodle.school.edu"
    ]
