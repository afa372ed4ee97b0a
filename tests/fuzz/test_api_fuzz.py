"""Schemathesis against the live OpenAPI document: every operation, authenticated, with valid
and invalid inputs. Each answer must have a documented status, content type, headers and body,
and none may be a server error.

Schemathesis's own runner (its CLI) does the work: its pytest loader for a schema that only a
fixture can provide does not run under pytest 9.2, and its report, one entry per distinct
failure with a curl line that reproduces it, is the clearest there is. It prints to the test's
output: `make fuzz` streams it, a plain pytest run shows it when the test fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import child_env
from tests.fuzz.conftest import LiveSite

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)
# Per operation and generation mode (valid, invalid), on top of the boundary cases of the
# coverage phase and the call sequences of the stateful one.
MAX_EXAMPLES = 100
# Fixed, and no example database carried between runs: the same cases every time, so CI is
# stable and a failure seen once is seen again. (The stateful phase follows the ids the server
# hands out, so its sequences still vary a little from run to run.)
SEED = 11


# A server error is any 5xx but 503, which is a documented answer, not a crash: a run naming an
# engine that no live worker host serves (`engine_unavailable`). status_code_conformance still
# refuses a 503 from any operation that does not document it.
CONFIG = """
[checks.not_a_server_error]
expected-statuses = ["1XX", "2XX", "3XX", "4XX", "503"]
"""


def fuzz_argv(site: LiveSite, report_dir: Path) -> list[str]:
    config = report_dir / "schemathesis.toml"
    config.write_text(CONFIG)
    return [
        SCHEMATHESIS, "--config-file", str(config), "run", f"{site.base_url}/api/openapi.json",
        "--header", f"Authorization: Bearer {site.token}",
        "--checks", ",".join(CHECKS),
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--generation-database", "none",
        "--workers", "1",
        "--request-timeout", "30",
        "--report", "junit", "--report-dir", str(report_dir),
        "--no-color",
    ]  # fmt: skip


@pytest.mark.timeout(900)
def test_every_operation_answers_as_documented_and_never_with_a_server_error(
    live_site: LiveSite, tmp_path: Path
) -> None:
    # Its output goes to this test's own: captured by pytest, or live under `pytest -s`.
    result = subprocess.run(fuzz_argv(live_site, tmp_path), cwd=tmp_path, env=child_env(), check=False)
    assert result.returncode == 0, "Schemathesis found failures: its report is in the output above"
