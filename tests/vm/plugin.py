"""pytest plugin for the emulated host of `make test-vm` (loaded there with `-p tests.vm.plugin`).

Prints one `@@CASE {json}` line per test on the console, which is how results leave the
emulated host: the pass it ran in (warm or cold), the test's outcome (passed, failed, skipped
with its reason) and every `cordon_` property the test attached (the hostile battery's case:
outcome, expected, how its VM started and how long that took, retries, audit; the freshness
checks' figures).
Tests the host already has a record for in this pass (from an earlier boot of the emulated host)
are deselected, so a restarted emulated host carries on where the last one stopped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

DONE_FILE = "CORDON_VM_DONE"  # env: a file with the tests already reported (done_entry), one per line
PASS = "CORDON_VM_PASS"  # env: the pass this pytest run is (l1-init sets it)


def done_entry(pass_name: str, nodeid: str) -> str:
    """A line of the done file: a test counts as done in one pass only (the harness writes them)."""
    return f"{pass_name}::{nodeid}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get(DONE_FILE)
    done = set(Path(path).read_text().splitlines()) if path and Path(path).is_file() else set()
    if not done:
        return
    this_pass = os.environ.get(PASS, "")
    dropped = [item for item in items if done_entry(this_pass, item.nodeid) in done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if done_entry(this_pass, item.nodeid) not in done]


def record(report: pytest.TestReport) -> dict[str, Any] | None:
    """The console record of one test, or None for a phase that decides nothing."""
    decisive = report.when == "call" or report.outcome != "passed"
    if not decisive:
        return None
    out: dict[str, Any] = {
        "test": report.nodeid,
        "pass": os.environ.get(PASS, ""),
        "status": report.outcome,
        "when": report.when,
    }
    out.update({key: value for key, value in report.user_properties if key.startswith("cordon_")})
    if report.skipped and isinstance(report.longrepr, tuple):
        out["skip_reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        out["failure"] = report.longreprtext[-2000:]
    return out


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    line = record(report)
    if line is None:
        return
    # The console of the emulated host: pytest's own output goes there too, but this line must
    # not wait for pytest's buffering or be broken by its progress dots.
    with open("/dev/console", "w") as console:
        console.write("\n@@CASE " + json.dumps(line, separators=(",", ":")) + "\n")
