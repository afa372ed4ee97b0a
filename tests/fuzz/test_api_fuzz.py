"""Schemathesis against the live OpenAPI document: every operation, authenticated, with valid
and invalid inputs, then call sequences along the document's links (its stateful phase). Each
answer must have a documented status, content type, headers and body, none may be a server
error, data the document forbids must be refused and data it allows accepted.

Schemathesis's own runner (its CLI) does the work: its pytest loader for a schema that only a
fixture can provide does not run under pytest 9.2, and its report, one entry per distinct
failure with a curl line that reproduces it, is the clearest there is. It prints to the test's
output: `make fuzz` streams it, a plain pytest run shows it when the test fails.
"""

from __future__ import annotations

import re
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
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "ignored_auth",  # the same call without the token must be refused (401)
    "use_after_free",  # what was deleted is gone (404) from then on
    "ensure_resource_availability",  # what was created can be read at once
)
# Not object_level_authorization: it needs a second user's credentials set up for Schemathesis,
# which this stack does not give it; tests/playground/classroom/test_courses_access.py holds that matrix.
# Per operation and generation mode (valid, invalid), on top of the boundary cases of the
# coverage phase and the call sequences of the stateful one.
MAX_EXAMPLES = 100
# Fixed, and no example database carried between runs: the same cases every time, so CI is
# stable and a failure seen once is seen again. (The stateful phase follows the ids the server
# hands out, so its sequences still vary a little from run to run.)
SEED = 11


# Call sequences the stateful phase must run (a run has some twenty to a hundred and fifty; how
# many is Hypothesis's choice): none would mean the document has lost its links (playground/openapi.py).
MIN_STATEFUL_SCENARIOS = 5


# A server error is any 5xx but 503, which is a documented answer, not a crash: a run naming an
# engine that no live worker host serves (`engine_unavailable`). status_code_conformance still
# refuses a 503 from any operation that does not document it.
#
# Data the document allows is accepted (positive_data_acceptance), except that a 422 is expected
# too where it comes from a rule JSON Schema cannot state: one that depends on what is stored (a
# course's runtimes and ceilings, an assignment's opening, due time and attempts, a cell as it was
# saved, a dataset and an output of the same name, a grading run, what kind of file an output
# is, whether students have submitted or a submission is graded yet, publishing's confirmation),
# spans several fields (due after opens, a test's expectation or its check program, unique
# cell ids), or reads an upload's content or name. A 400 there is still a failure.
#
# Call sequences run up to 20 calls (Schemathesis's default, 6, rarely gets from a course to an
# assignment to a submission and back). ignored_auth is left to the other phases: with it in the
# stateful phase too, that phase followed far fewer of the links (14 of 412, against about 60).
CONFIG = """
[checks.not_a_server_error]
expected-statuses = ["1XX", "2XX", "3XX", "4XX", "503"]

[phases.stateful]
max-steps = 20

[phases.stateful.checks.ignored_auth]
enabled = false

[[operations]]
include-name = [
    "POST /api/runs",
    "POST /api/runs/{run_id}/rerun",
    "GET /api/runs/{run_id}/outputs/{name}/preview",
    "GET /api/runs/{run_id}/images/{name}",
    "POST /api/notebooks",
    "PUT /api/notebooks/{notebook_id}",
    "POST /api/notebooks/import",
    "POST /api/notebooks/{notebook_id}/cells/{cell_id}/run",
    "POST /api/courses/{course_id}/roster",
    "POST /api/courses/{course_id}/assignments",
    "PUT /api/assignments/{assignment_id}",
    "POST /api/assignments/{assignment_id}/try",
    "POST /api/assignments/{assignment_id}/submissions",
    "POST /api/assignments/{assignment_id}/publish",
    "POST /api/assignments/{assignment_id}/unpublish",
    "PUT /api/assignments/{assignment_id}/extensions",
    "POST /api/submissions/{submission_id}/adjustments",
]
checks.positive_data_acceptance.expected-statuses = ["2XX", "3XX", "401", "403", "404", "409", "422", "429", "5XX"]
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
    output = []
    with subprocess.Popen(fuzz_argv(live_site, tmp_path), cwd=tmp_path, env=child_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as fuzz:  # fmt: skip
        for line in fuzz.stdout or ():
            sys.stdout.write(line)
            output.append(line)
    assert fuzz.returncode == 0, "Schemathesis found failures: its report is in the output above"
    scenarios = re.search(r"Scenarios:\s+(\d+)", "".join(output))
    assert scenarios and int(scenarios[1]) >= MIN_STATEFUL_SCENARIOS, "the stateful phase ran (almost) no sequences"
