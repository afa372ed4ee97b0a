"""Settings fail at start-up, with a message naming the variable, on a malformed value."""

import re
import subprocess

import pytest

from tests.conftest import PYTHON, child_env


def _check(project_root, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "manage.py", "check"],
        cwd=project_root,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_valid_settings_pass_the_system_check(project_root) -> None:
    result = _check(project_root)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CORDON_DEBUG", "yes", "CORDON_DEBUG must be one of true, false, 1, 0; got 'yes'"),
        ("CORDON_HTTP_PORT", "80k", "CORDON_HTTP_PORT must be a whole number; got '80k'"),
        ("CORDON_HTTP_PORT", "0", "CORDON_HTTP_PORT must be at least 1; got 0"),
        ("CORDON_MAX_MEMORY_MIB", "lots", "CORDON_MAX_MEMORY_MIB must be a whole number; got 'lots'"),
        ("CORDON_MAX_WALL_TIMEOUT_S", "0", "CORDON_MAX_WALL_TIMEOUT_S must be at least 0.001; got 0"),
        ("CORDON_LOG_FORMAT", "xml", "CORDON_LOG_FORMAT must be 'json' or 'plain', not 'xml'"),
        ("CORDON_METRICS_BIND", "9464x", "CORDON_METRICS_BIND must be host:port, such as 10.0.0.5:9464; got '9464x'"),
        ("CORDON_RETENTION_AUDIT_DAYS", "0", "CORDON_RETENTION_AUDIT_DAYS must be at least 1; got 0"),
        ("CORDON_COURSE_CREATORS", "some", "CORDON_COURSE_CREATORS must be 'everyone' or 'instructors', not 'some'"),
    ],
)
def test_a_malformed_variable_stops_start_up_with_a_clear_message(project_root, variable, value, message) -> None:
    result = _check(project_root, **{variable: value})
    assert result.returncode != 0
    assert f"Cordon configuration error: {message}" in result.stderr


def _setting(project_root, expression: str, **env: str) -> str:
    code = f"import django; django.setup(); from django.conf import settings as s; print({expression})"
    result = subprocess.run(
        [PYTHON, "-c", code],
        cwd=project_root,
        env=child_env(DJANGO_SETTINGS_MODULE="playground.settings", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_https_turns_on_secure_cookies_hsts_and_the_proxy_header(project_root) -> None:
    expression = (
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER, "
        "s.SECURE_SSL_REDIRECT"
    )
    assert _setting(project_root, expression) == "False False 0 None False"
    on = _setting(project_root, expression, CORDON_HTTPS="true", CORDON_HSTS_SECONDS="600")
    assert on == "True True 600 ('HTTP_X_FORWARDED_PROTO', 'https') True"


def test_the_https_deployment_check_finds_nothing_but_the_domain_wide_hsts_choices(project_root) -> None:
    result = subprocess.run(
        [PYTHON, "manage.py", "check", "--deploy"],
        cwd=project_root,
        env=child_env(
            CORDON_HTTPS="true", CORDON_SECRET_KEY="k" * 60 + "-not-a-real-key-but-long-and-varied-0123456789"
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = set(re.findall(r"\(security\.(W\d+)\)", result.stdout + result.stderr))
    # HSTS for subdomains and the preload list bind every site of the domain: the operator's call.
    assert found == {"W005", "W021"}, result.stdout + result.stderr


def test_log_lines_are_json_unless_the_plain_format_is_asked_for(project_root) -> None:
    line = "import logging; logging.getLogger('cordon.events').warning('hello', extra={'cordon': {'run': 'r1'}})"
    for log_format, expected in (("json", '"run": "r1"'), ("plain", "hello")):
        code = f"import django; django.setup(); {line}"
        result = subprocess.run(
            [PYTHON, "-c", code], cwd=project_root, capture_output=True, text=True, timeout=60,
            env=child_env(DJANGO_SETTINGS_MODULE="playground.settings", CORDON_LOG_FORMAT=log_format),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        [written] = result.stderr.splitlines()
        assert expected in written
        assert written.startswith("{") == (log_format == "json")
