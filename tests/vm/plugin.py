"""pytest plugin for the emulated host of `make test-vm` (loaded there with `-p tests.vm.plugin`).

Prints one `@@CASE {json}` line per test on the console, which is how results leave the
emulated host: the pass it ran in (warm or cold), the test's outcome (passed, failed, skipped
with its reason) and every `cordon_` property the test attached (the hostile battery's case:
outcome, expected, how its VM started and how long that took, retries, audit; the freshness
checks' figures).
Tests the host already has a record for in this pass (from an earlier boot of the emulated host)
are deselected, so a restarted emulated host carries on where the last one stopped.

It also calibrates the battery's time budgets as the session starts (`calibrate`): a case's CPU
and wall limits, except the one the case is about, are multiplied by CORDON_TEST_SLOWDOWN. A
fixed 10 did not hold under load (a pandas import through a warm branch used 92 s of CPU where
the same case cold used 63 s, and ended cpu_limit). So the plugin runs CALIBRATION_JOB (the
analyst stack's import, what the slowest cases do) in a microVM the way the cases run, takes
its CPU seconds over the same job's on the real machine (measured by the harness before the
emulated host boots, CORDON_VM_CALIBRATION_BASE_CPU_S), and sets the factor to MARGIN times
that ratio, never below the harness's floor and never above CAP. A real misclassification still
fails: a case that loops where it should succeed still meets a finite budget, and a case whose
expectation is a limit keeps that limit as written. One calibration per run of the harness, used
by both passes (the warm pass's, through a branch, is the costlier): a restarted emulated host is
given the one an earlier boot measured (CORDON_VM_CALIBRATION_CARRIED) instead of spending a
minute or two measuring it again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

CALIBRATION_JOB = (
    b"import numpy, pandas\n"
    b"frame = pandas.DataFrame({'value': numpy.arange(1000)})\n"
    b"print(int(frame.groupby(frame['value'] % 7)['value'].sum().sum()))\n"
)
BASE = "CORDON_VM_CALIBRATION_BASE_CPU_S"  # env: CALIBRATION_JOB's CPU seconds on the real machine
SLOWDOWN = "CORDON_TEST_SLOWDOWN"  # env: read by the battery (tests.runner.test_hostile.slowdown)
MARGIN, CAP = 2.0, 300.0
CALIBRATED = Path("/tmp/cordon-vm-calibration.json")  # this boot's, for the next pass
CARRIED = "CORDON_VM_CALIBRATION_CARRIED"  # env: the calibration an earlier boot measured (JSON), if any
EARLIER = ", measured by an earlier boot"  # a carried calibration's note ends so (once, carried again or not)
DONE_FILE = "CORDON_VM_DONE"  # env: a file with the tests already reported (done_entry), one per line
PASS = "CORDON_VM_PASS"  # env: the pass this pytest run is (l1-init sets it)


def done_entry(pass_name: str, nodeid: str) -> str:
    """A line of the done file: a test counts as done in one pass only (the harness writes them)."""
    return f"{pass_name}::{nodeid}"


def slowdown_for(vm_cpu_s: float, base_cpu_s: float, floor: float) -> float:
    """The budgets' factor: MARGIN times how much slower the job ran, within [floor, CAP]."""
    return round(min(CAP, max(floor, MARGIN * vm_cpu_s / base_cpu_s)), 1)


def calibrate(engine: str = "smolvm") -> dict[str, Any]:
    """Run CALIBRATION_JOB as the cases run (retried as they are after an emulation fault) and
    say the factor; the floor, and why, when there is no base or the job did not succeed."""
    from runner.spec import Limits, RunSpec
    from runner.supervisor import Supervisor
    from tests.runner.test_hostile import retrying

    floor = float(os.environ.get(SLOWDOWN, "1"))
    base = float(os.environ.get(BASE, "0") or 0)
    if base <= 0:
        return {"slowdown": floor, "note": f"no base measurement ({BASE} unset): the floor"}
    supervisor = Supervisor()
    limits = Limits(cpu_time_s=1500, wall_timeout_s=1500, memory_mib=512)
    spec = RunSpec(runtime="python", script=CALIBRATION_JOB, limits=limits, engine=engine)
    started = time.monotonic()
    result, retried = retrying(supervisor, lambda n: supervisor.run(spec))
    said: dict[str, Any] = {"base_cpu_s": base, "retries": len(retried), "seconds": round(time.monotonic() - started)}
    if result.outcome.value != "succeeded" or not result.cpu_s:
        return {**said, "slowdown": floor, "note": f"the job did not succeed ({result.reason}): the floor"}
    factor = slowdown_for(result.cpu_s, base, floor)
    return {**said, "vm_cpu_s": result.cpu_s, "vm_start": result.vm_start, "slowdown": factor,
            "note": f"{MARGIN:g} x {result.cpu_s:.1f} s / {base:.2f} s, within [{floor:g}, {CAP:g}]"}  # fmt: skip


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get(PASS) is None:
        return  # not the emulated host's battery
    if CALIBRATED.is_file():
        calibration = json.loads(CALIBRATED.read_text())
    elif os.environ.get(CARRIED):
        carried = json.loads(os.environ[CARRIED])
        note = carried.get("note", "").removesuffix(EARLIER)
        calibration = {**carried, "note": note + EARLIER}
        CALIBRATED.write_text(json.dumps(calibration))
    else:
        calibration = calibrate()
        CALIBRATED.write_text(json.dumps(calibration))
    os.environ[SLOWDOWN] = f"{calibration['slowdown']:g}"
    _console("@@CALIBRATION " + json.dumps({"pass": os.environ.get(PASS), **calibration}, separators=(",", ":")))


def _console(line: str) -> None:
    # The console of the emulated host: pytest's own output goes there too, but this line must
    # not wait for pytest's buffering or be broken by its progress dots.
    with open("/dev/console", "w") as console:
        console.write("\n" + line + "\n")


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
    if line is not None:
        _console("@@CASE " + json.dumps(line, separators=(",", ":")))
