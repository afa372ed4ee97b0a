"""Warm starts through real microVMs: two branches of one base are fresh (different /dev/urandom
bytes, os.urandom and random seeds) and on the host's clock (within 1 s).

Needs a host whose KVM boots microVMs (make test-vm runs it in the emulated host, in the pass with
CORDON_SMOLVM_WARM=true); elsewhere it skips, saying why.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from runner.doctor import FRESHNESS_LIMITS, FRESHNESS_PROBE, MAX_CLOCK_SKEW_S, freshness
from runner.engines.smolvm import SmolvmEngine
from runner.spec import RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.test_hostile import BOOT_RETRIES, sandbox_fault

BRANCHES = 3


@pytest.mark.kvm
@pytest.mark.parametrize("engine", ["smolvm"])
def test_branches_of_one_base_are_fresh_and_on_the_hosts_clock(
    engine: str, canary: dict[str, Any], record_property: Any
) -> None:
    if not canary.get("ok"):
        pytest.skip(f"needs a host whose KVM boots microVMs; this host's canary boot failed: {canary.get('reason')}")
    supervisor = Supervisor()
    smolvm = supervisor.registry.engines[engine]
    assert isinstance(smolvm, SmolvmEngine)
    on, why = smolvm.warm_enabled()
    if not on:
        pytest.skip(why)
    record = smolvm.ensure_base(supervisor.images.resolve("python"), FRESHNESS_LIMITS)
    assert record is not None and record.state == "frozen", record
    served = smolvm.bases.served(record.name)

    runs: list[tuple[RunResult, float, float]] = []
    retried: list[str] = []
    while len(runs) < BRANCHES:
        before = time.time()
        result = supervisor.run(
            RunSpec(runtime="python", script=FRESHNESS_PROBE, engine=engine, limits=FRESHNESS_LIMITS)
        )
        error = result.error.code if result.error else None
        if sandbox_fault(result.outcome.value, error) and len(retried) < BOOT_RETRIES and result.cleanup_ok:
            retried.append(result.reason)  # the emulated host's fault, not the branch's freshness
            continue
        runs.append((result, before, time.time()))
    figures = freshness(runs)
    figures["boot_s"] = [r.timings.get("boot_s") for r, _, _ in runs]
    figures["branch_s"] = [r.timings.get("branch_s") for r, _, _ in runs]
    figures["retries"] = retried
    record_property("cordon_freshness", figures)

    assert figures["vm_starts"] == ["branch"] * BRANCHES, [r.engine_note for r, _, _ in runs]
    assert figures["distinct_urandom"] and figures["distinct_os_urandom"] and figures["distinct_random"], figures
    assert figures["max_clock_skew_s"] is not None and figures["max_clock_skew_s"] <= MAX_CLOCK_SKEW_S, figures
    assert all(abs(s) <= MAX_CLOCK_SKEW_S for s in figures["refresh_skews_s"]), figures
    assert figures["ok"], figures["problems"]
    assert smolvm.bases.served(record.name) == served + BRANCHES
    for result, _, _ in runs:
        assert result.cleanup_ok, [c for c in result.cleanup if not c.ok]


def _probe_result(run_id: str, urandom: str, at: float, vm_start: str = "branch") -> RunResult:
    import json

    from runner.spec import CleanupCheck, Outcome

    out = {"urandom": urandom, "os_urandom": urandom[:32], "random": int(urandom[:8], 16), "time": at}
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id=run_id, exit_code=0, stdout=json.dumps(out).encode())
    result.vm_start, result.timings["clock_skew_s"] = vm_start, 0.0
    result.cleanup.append(CleanupCheck("processes", True, "none left"))
    return result


def test_the_freshness_check_fails_on_shared_randomness_a_wrong_clock_or_a_cold_boot() -> None:
    now = time.time()
    fresh = freshness([(_probe_result("a", "ab" * 32, now), now - 1, now + 1),
                       (_probe_result("b", "cd" * 32, now), now - 1, now + 1)])  # fmt: skip
    assert fresh["ok"] and fresh["max_clock_skew_s"] == 0.0, fresh
    same = freshness([(_probe_result("a", "ab" * 32, now), now - 1, now + 1),
                      (_probe_result("b", "ab" * 32, now), now - 1, now + 1)])  # fmt: skip
    assert not same["ok"] and not same["distinct_urandom"] and not same["distinct_random"]
    late = freshness([(_probe_result("a", "ab" * 32, now + 3.5), now - 1, now + 1),
                      (_probe_result("b", "cd" * 32, now), now - 1, now + 1)])  # fmt: skip
    assert not late["ok"] and late["max_clock_skew_s"] == 2.5
    cold = freshness([(_probe_result("a", "ab" * 32, now, "cold"), now - 1, now + 1),
                      (_probe_result("b", "cd" * 32, now), now - 1, now + 1)])  # fmt: skip
    assert not cold["ok"] and "not every run branched" in cold["problems"][0]
