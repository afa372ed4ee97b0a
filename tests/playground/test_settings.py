"""Settings fail at start-up, with a message naming the variable, on a malformed value."""

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
    ],
)
def test_a_malformed_variable_stops_start_up_with_a_clear_message(project_root, variable, value, message) -> None:
    result = _check(project_root, **{variable: value})
    assert result.returncode != 0
    assert f"Cordon configuration error: {message}" in result.stderr
