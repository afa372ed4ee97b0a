"""Warm starts through real microVMs: two branches of one base are fresh (different /dev/urandom
bytes, os.urandom and random seeds) and on the host's clock (within 1 s).

Needs a host whose KVM boots microVMs (make test-vm runs it in the emulated host, in the pass with
CORDON_SMOLVM_WARM=true); elsewhere it skips, saying why.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from runner.engines.smolvm.checks import FRESHNESS_LIMITS, FRESHNESS_PROBE, MAX_CLOCK_SKEW_S, freshness
from runner.engines.smolvm.engine import SmolvmEngine
from runner.ready import ReadyPool, ReadySettings, ready_class
from runner.spec import Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.test_hostile import retrying, scaled

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
    started: list[float] = []

    def branch(_: int) -> RunResult:
        started.append(time.time())
        return supervisor.run(RunSpec(runtime="python", script=FRESHNESS_PROBE, engine=engine, limits=FRESHNESS_LIMITS))

    while len(runs) < BRANCHES:
        result, again = retrying(supervisor, branch)  # the emulated host's faults, not the branch's freshness
        retried += again
        runs.append((result, started[-1], time.time()))
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


# FRESHNESS_PROBE and what else a ready branch must show fresh: the hash seed (PYTHONHASHSEED unset),
# uuid4, an empty /tmp, and a program started at the run (its process's age within the run).
READY_PROBE = b"""import json, os, random, time, uuid
with open("/dev/urandom", "rb") as f:
    urandom = f.read(32).hex()
with open("/proc/self/stat") as f:
    started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
with open("/proc/uptime") as f:
    age = float(f.read().split()[0]) - started
print(json.dumps({"urandom": urandom, "os_urandom": os.urandom(16).hex(), "random": random.random(),
                  "time": time.time(), "hash": hash("x"), "uuid4": str(uuid.uuid4()), "tmp": os.listdir("/tmp"),
                  "age_s": age, "seed_env": os.environ.get("PYTHONHASHSEED")}))
"""
MEMORY_BOMB = b"chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"


@pytest.mark.kvm
@pytest.mark.parametrize("engine", ["smolvm"])
def test_ready_branches_are_fresh_at_hand_over_bound_by_the_run_and_used_once(
    engine: str, canary: dict[str, Any], record_property: Any
) -> None:
    """Branches made ahead (runner.ready) and handed a run: fresh as of the hand-over (the refresh
    is done then, not when the branch was made), on the host's clock, audited as used once; a
    memory bomb in one ends memory_limit. Each run's VM start (staging, hand-over and refresh,
    until the program could start) is recorded for the report's ready/cold ratio."""
    if not canary.get("ok"):
        pytest.skip(f"needs a host whose KVM boots microVMs; this host's canary boot failed: {canary.get('reason')}")
    settings = ReadySettings(enabled=True, classes=1, wait_s=0.0, make_timeout_s=600.0, max_age_s=3600.0)
    supervisor = Supervisor(ready=settings)
    smolvm = supervisor.registry.engines[engine]
    assert isinstance(smolvm, SmolvmEngine)
    on, why = smolvm.warm_enabled()
    if not on:
        pytest.skip(why)
    image = supervisor.images.resolve("python")
    record = smolvm.ensure_base(image, FRESHNESS_LIMITS)
    assert record is not None and record.state == "frozen", record
    # A ready branch holds a whole VM's memory in admission: the bases the battery's other sizes
    # left would leave this emulated host none for it (the pool then makes none, and says so).
    for other in smolvm.bases.names():
        if other != record.name:
            left = [c for c in smolvm.remove_base(other) if not c.ok]
            assert not left, left
    pool = ReadyPool.here(supervisor)
    spec = RunSpec(runtime="python", script=READY_PROBE, engine=engine, limits=FRESHNESS_LIMITS)
    cls, why = ready_class(spec, image, smolvm)
    assert cls is not None and cls.fixed == record.name, why
    runs: list[tuple[RunResult, float, float]] = []
    retried: list[str] = []
    started: list[float] = []

    def hand_over(_: int) -> RunResult:
        made = pool.wait_ready(cls, timeout_s=300)
        status = {"pool": pool.status(), "admission": supervisor.admission.peek()}
        assert made is not None, json.dumps(status, default=str)
        time.sleep(2.0)  # waiting: whatever the refresh sets must be of the hand-over, not of the making
        started.append(time.time())
        return supervisor.run(spec)

    try:
        while len(runs) < BRANCHES:
            result, again = retrying(supervisor, hand_over)  # the emulated host's faults, not the branch's
            retried += again
            runs.append((result, started[-1], time.time()))
        # Its time limits scaled as the battery's are where they are not the case's (an emulated
        # guest touches memory slowly: unscaled, it ran out of CPU time first); its memory is the class's.
        slow = scaled(FRESHNESS_LIMITS)

        def bomb_in_a_ready_branch(_: int) -> RunResult:
            assert pool.wait_ready(cls, timeout_s=300) is not None, pool.status()
            return supervisor.run(RunSpec(runtime="python", script=MEMORY_BOMB, engine=engine, limits=slow))

        # Retried as the battery's memory_bomb case is: CI once saw smolvm lose the agent mid-exec
        # here (exec_error "connection closed"), the emulated host's fault the battery counts.
        bomb, again = retrying(supervisor, bomb_in_a_ready_branch)
        retried += again
    finally:
        pool.close()
    figures, reads = _ready_figures(runs, bomb, retried)
    record_property("cordon_freshness", figures)

    assert figures["sandbox_starts"] == ["ready"] * BRANCHES, [r.engine_note for r, _, _ in runs]
    assert figures["vm_starts"] == ["branch"] * BRANCHES, figures
    assert figures["distinct_urandom"] and figures["distinct_os_urandom"] and figures["distinct_random"], figures
    assert figures["distinct_hash"] and figures["distinct_uuid4"], figures
    assert all(r["seed_env"] is None for r in reads) and figures["tmp"] == [[]] * BRANCHES, figures
    # the program started at the run: younger than the run (not waiting in the branch beforehand)
    assert all(r["age_s"] <= after - before + 1.0 for r, (_, before, after) in zip(reads, runs, strict=True)), reads
    assert figures["max_clock_skew_s"] is not None and figures["max_clock_skew_s"] <= MAX_CLOCK_SKEW_S, figures
    assert figures["ok"], figures["problems"]
    for result, _, _ in runs:
        assert result.cleanup_ok and "single use" in [c.name for c in result.cleanup], result.cleanup
    assert bomb.outcome is Outcome.MEMORY_LIMIT and bomb.sandbox_start == "ready", (bomb.reason, bomb.engine_note)
    assert bomb.cleanup_ok, [c for c in bomb.cleanup if not c.ok]


def _ready_figures(
    runs: list[tuple[RunResult, float, float]], bomb: RunResult, retried: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The freshness record of runs handed ready branches (freshness's, and what the probe read in
    each: its hash seed, a uuid4, /tmp), and the probe's reads."""
    figures = freshness(runs)
    reads = [json.loads(r.stdout.decode().strip().splitlines()[-1]) for r, _, _ in runs if r.stdout.strip()]
    figures["distinct_hash"] = len({r["hash"] for r in reads}) == len(reads)
    figures["distinct_uuid4"] = len({r["uuid4"] for r in reads}) == len(reads)
    figures["tmp"] = [r["tmp"] for r in reads]
    figures["sandbox_starts"] = [r.sandbox_start for r, _, _ in runs]
    figures["ready_start_s"] = [
        round(sum(r.timings.get(k) or 0.0 for k in ("staging_s", "handover_s", "boot_s")), 3) for r, _, _ in runs
    ]
    figures["refresh_s"] = [r.timings.get("refresh_s") for r, _, _ in runs]
    figures["bomb"] = f"{bomb.outcome.value} ({bomb.sandbox_start}, {bomb.vm_start})"
    figures["retries"] = retried
    figures["ok"] = figures["ok"] and figures["sandbox_starts"] == ["ready"] * BRANCHES
    return figures, reads


def _probe_result(run_id: str, urandom: str, at: float, vm_start: str = "branch") -> RunResult:
    from runner.spec import CleanupCheck

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
