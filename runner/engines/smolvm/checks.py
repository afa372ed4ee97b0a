"""What the smolvm engine proves about a host before it serves a run there: the wheel installed,
/dev/kvm open to per-VM uids, a canary boot (a tiny microVM running a no-op), and, where warm
starts may be on, a warm canary (two branches of one base, fresh and on the host's clock).

A canary's verdict is kept in a file under the host state directory: the engine's quick
availability check (`SmolvmEngine.availability`) reads it, `python -m runner doctor` renews it.
"""

from __future__ import annotations

import dataclasses
import grp
import json
import stat
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from runner.engines.base import Availability, Check, Diagnosis, DoctorContext
from runner.spec import Limits, Outcome, RunResult, RunSpec


class CanaryEngine(Protocol):
    """What the canary boots and the doctor's checks use of the smolvm engine (engine.py's
    SmolvmEngine, which calls them: so this module imports nothing of it)."""

    warm: Any  # its WarmSettings (warm.py), which the warm canary sets for its own boots

    @property
    def name(self) -> str: ...
    @property
    def canary_path(self) -> Path | None: ...
    def installed(self) -> Availability: ...
    def read_canary(self) -> dict[str, Any] | None: ...
    def warm_enabled(self) -> tuple[bool, str]: ...
    def ensure_base(self, image: Any, limits: Limits) -> Any: ...
    def describe_bases(self) -> list[dict[str, Any]]: ...


CANARY_FILE = "smolvm-canary.json"
WARM_CANARY_FILE = "smolvm-warm-canary.json"
CANARY_MAX_AGE_S = 6 * 3600
_CANARY_TIME = "%Y-%m-%dT%H:%M:%SZ"
KVM_FIX = "groupadd --system kvm; chgrp kvm /dev/kvm; chmod 0660 /dev/kvm (make run and make test do this)"
# What the warm canary runs in two branches of one base: the guest's urandom, Python's os.urandom
# and random (seeded from the kernel at start), and the guest's clock.
FRESHNESS_PROBE = b"""import json, os, random, time
with open("/dev/urandom", "rb") as f:
    urandom = f.read(32).hex()
print(json.dumps({"urandom": urandom, "os_urandom": os.urandom(16).hex(), "random": random.random(),
                  "time": time.time()}))
"""
FRESHNESS_LIMITS = Limits(wall_timeout_s=30, memory_mib=256)
MAX_CLOCK_SKEW_S = 1.0


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object kept in a file (a canary's record), or None if there is none that reads as one."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)


def canary_verdict(canary: Mapping[str, Any] | None) -> Availability:
    """Whether smolvm can run here, by the cached canary boot's record (None: there is none)."""
    if not canary:
        return Availability(False, "no smolvm canary boot has run on this host (python -m runner doctor)")
    if canary.get("ok"):
        return Availability(True, "the cached smolvm canary boot passed")
    return Availability(
        False, f"the smolvm canary boot failed ({canary.get('reason')}, at {canary.get('at')})",
        brief=f"no microVM could boot on this host (its canary boot failed at {canary.get('at')}; the host's "
        "doctor result says why)",
    )  # fmt: skip


def canary_record(result: RunResult, *, seconds: float) -> dict[str, Any]:
    """The record of a canary boot (a smolvm run of a no-op), as the canary file keeps it."""
    ok = result.outcome is Outcome.SUCCEEDED and result.cleanup_ok
    if ok:
        reason = f"booted in {result.timings.get('boot_s', 0):.1f} s and ran python3"
    elif result.error is not None:
        reason = f"{result.error.code}: {result.error.message}"
    else:
        reason = f"{result.outcome.value}: {result.reason}"
    return {
        "ok": ok,
        "reason": reason,
        "seconds": round(seconds, 2),
        "at": _now(),
        "engine_version": result.engine_version,
        "cleanup_ok": result.cleanup_ok,
    }


def canary_age_s(canary: Mapping[str, Any]) -> float:
    """How old a canary record is; infinitely old when it says no time that can be read."""
    try:
        at = datetime.strptime(str(canary.get("at")), _CANARY_TIME).replace(tzinfo=UTC)
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - at).total_seconds()


def _now() -> str:
    return datetime.now(UTC).strftime(_CANARY_TIME)


def run_canary(engine: CanaryEngine, run: Callable[[RunSpec], RunResult]) -> dict[str, Any]:
    """Boot a tiny microVM through the real engine (`run`: a RunSpec through the supervisor) and run
    a no-op in it; keep the verdict in the engine's canary file."""
    started = time.monotonic()
    result = run(
        RunSpec(runtime="python", script=b"pass", engine=engine.name, limits=Limits(wall_timeout_s=30, memory_mib=256))
    )
    record = canary_record(result, seconds=time.monotonic() - started)
    if engine.canary_path is not None:
        write_json(engine.canary_path, record)
    return record


def freshness(results: list[tuple[RunResult, float, float]]) -> dict[str, Any]:
    """Whether runs of FRESHNESS_PROBE (each with the host's time before and after it) started
    as branches, read different random bytes and seeds, and saw the host's clock within 1 s."""
    reads, skews, problems = [], [], []
    for result, before, after in results:
        if result.outcome is not Outcome.SUCCEEDED or not result.cleanup_ok:
            problems.append(
                f"run {result.run_id}: {result.outcome.value} ({result.reason}), cleanup ok {result.cleanup_ok}"
            )
            continue
        try:
            read = json.loads(result.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            problems.append(f"run {result.run_id} printed no probe: {result.stdout[-200:]!r}")
            continue
        reads.append(read)
        # The guest's clock read during the run must fall within the run's window on the host's.
        skew = read["time"] - before if read["time"] < before else max(0.0, read["time"] - after)
        skews.append(round(skew, 3))
    starts = [r.vm_start for r, _, _ in results]
    figures: dict[str, Any] = {
        "vm_starts": starts,
        "distinct_urandom": len({r["urandom"] for r in reads}) == len(reads),
        "distinct_os_urandom": len({r["os_urandom"] for r in reads}) == len(reads),
        "distinct_random": len({r["random"] for r in reads}) == len(reads),
        "clock_skews_s": skews,
        "refresh_skews_s": [r.timings.get("clock_skew_s") for r, _, _ in results],
        "max_clock_skew_s": max((abs(s) for s in skews), default=None),
    }
    if any(start != "branch" for start in starts):
        problems.append(f"not every run branched a base: {starts}; {[r.engine_note for r, _, _ in results]}")
    for name in ("distinct_urandom", "distinct_os_urandom", "distinct_random"):
        if not figures[name]:
            problems.append(f"two branches read the same {name.removeprefix('distinct_')}")
    if figures["max_clock_skew_s"] is None or figures["max_clock_skew_s"] > MAX_CLOCK_SKEW_S:
        problems.append(f"guest clock off the host's by {figures['max_clock_skew_s']} s")
    figures["ok"] = len(reads) == len(results) >= 2 and not problems
    figures["problems"] = problems
    return figures


def run_warm_canary(engine: CanaryEngine, ctx: DoctorContext) -> dict[str, Any]:
    """Build (or reuse) the python base at the canary's size, run the probe in two branches of it,
    check that they are fresh; keep the verdict, which CORDON_SMOLVM_WARM=auto follows."""
    started = time.monotonic()
    saved = engine.warm
    engine.warm = dataclasses.replace(saved, mode="true")  # the canary decides what auto does
    try:
        record = engine.ensure_base(ctx.image("python"), FRESHNESS_LIMITS)
        if record is None or record.state != "frozen":
            why = record.error if record is not None else "did not finish in time"
            figures: dict[str, Any] = {"ok": False, "problems": [f"the base was not built: {why}"]}
        else:
            runs = []
            for _ in range(2):
                before = time.time()
                result = ctx.run(
                    RunSpec(runtime="python", script=FRESHNESS_PROBE, engine=engine.name, limits=FRESHNESS_LIMITS)
                )
                runs.append((result, before, time.time()))
            figures = freshness(runs)
            figures["branch_s"] = [r.timings.get("branch_s") for r, _, _ in runs]
            figures["boot_s"] = [r.timings.get("boot_s") for r, _, _ in runs]
            figures["base"] = record.name
    finally:
        engine.warm = saved
    reason = "two branches were fresh and on the host's clock" if figures["ok"] else "; ".join(figures["problems"])
    out = {
        "ok": figures["ok"],
        "reason": reason,
        "seconds": round(time.monotonic() - started, 2),
        "at": _now(),
        "figures": figures,
    }
    if engine.warm.canary_file is not None:
        write_json(engine.warm.canary_file, out)
    return out


def diagnose(engine: CanaryEngine, ctx: DoctorContext) -> Diagnosis:
    """The smolvm engine's doctor checks: installed, /dev/kvm, the canary boot (run when none is
    kept, when it is stale, or when asked), then warm starts and every base."""
    installed = engine.installed()
    checks = [kvm_check(), Check("smolvm engine", installed.ok, installed.why)]
    canary = engine.read_canary()
    if ctx.recheck or canary is None or canary_age_s(canary) > CANARY_MAX_AGE_S:
        canary = run_canary(engine, ctx.run)
    booted = bool(canary.get("ok"))
    if booted:
        detail = f"passed at {canary.get('at')} in {canary.get('seconds')} s: {canary.get('reason')}"
    else:  # the host's fact: its kvm, if it failed too, is the check to fix
        detail = (
            f"no microVM boots on this host: the canary boot FAILED at {canary.get('at')} after "
            f"{canary.get('seconds')} s ({canary.get('reason')}); `python -m runner doctor --recheck` tries again"
        )
    checks.append(Check("smolvm canary boot", booted, detail, advisory=not booted))
    checks += warm_checks(engine, ctx, booted=booted)
    return Diagnosis(checks, canary_verdict(canary).ok)


def kvm_check() -> Check:
    dev = Path("/dev/kvm")
    if not dev.exists():
        return Check("kvm", False, "/dev/kvm absent: no microVM can run here")
    st = dev.stat()
    mode = stat.S_IMODE(st.st_mode)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    if group != "kvm" or mode & 0o060 != 0o060:
        detail = f"/dev/kvm is {group} mode {mode:04o}: smolvm's per-VM uids cannot open it. Fix: {KVM_FIX}"
        return Check("kvm", False, detail)
    return Check("kvm", True, f"/dev/kvm {group} mode {mode:04o}; opening it proves nothing, only a canary boot does")


def warm_checks(engine: CanaryEngine, ctx: DoctorContext, *, booted: bool) -> list[Check]:
    """Warm starts: the setting, the warm canary (run when a microVM boots here), and every base."""
    checks = []
    canary = read_json(engine.warm.canary_file) if engine.warm.canary_file else None
    stale = ctx.recheck or canary is None or canary_age_s(canary) > CANARY_MAX_AGE_S
    if booted and engine.warm.mode != "false" and stale:
        canary = run_warm_canary(engine, ctx)
    on, why = engine.warm_enabled()
    if canary is not None:
        verdict = "passed" if canary.get("ok") else "FAILED"
        detail = f"{verdict} at {canary.get('at')} in {canary.get('seconds')} s: {canary.get('reason')}"
        checks.append(Check("smolvm warm canary", bool(canary.get("ok")) or engine.warm.mode == "false", detail))
    security = "" if not on else "; branch VMMs run without smolvm's Landlock layer (README: warm starts)"
    checks.append(Check("smolvm warm starts", True, f"{why}; bases built {engine.warm.build}{security}"))
    for base in engine.describe_bases():
        memory = f", {int(base['memory_bytes']) // (1 << 20)} MiB held" if base.get("memory_bytes") else ""
        detail = (
            f"{base['image']} {str(base['image_digest'])[:19]} at {base['size_class']}: {base['state']}"
            f"{'' if base['keeper_alive'] else ' (keeper gone)'}, {base['age_s']:.0f} s old, "
            f"{base['served']} branches served{memory}"
        )
        if base["error"]:
            detail += f"; {str(base['error'])[:200]}"
        checks.append(Check(f"base {base['name']}", base["state"] != "failed", detail))
    return checks
