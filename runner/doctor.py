"""`python -m runner doctor`: what this host can do, each claim backed by a check that ran."""

from __future__ import annotations

import dataclasses
import grp
import json
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner import netns
from runner.cgroups import CgroupLayout, favors_dynmods
from runner.images import ImageStore, recipe_names
from runner.ready import status_files
from runner.registry import canary_age_s, canary_record, canary_verdict, read_json, smolvm_installed
from runner.seccomp import bpf_program
from runner.spec import Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


CANARY_MAX_AGE_S = 6 * 3600


def diagnose(supervisor: Supervisor | None = None, *, recheck: bool = False) -> dict[str, Any]:
    supervisor = supervisor or Supervisor()
    checks = [
        _bwrap(),
        _cgroups(),
        _seccomp(),
        *_images(supervisor.images),
        _kvm(),
        _smolvm_engine(),
        _egress(supervisor),
    ]
    if all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "image python")):
        checks.append(_namespace_canary(supervisor))
    canary = supervisor.registry.read_canary()
    if recheck or canary is None or canary_age_s(canary) > CANARY_MAX_AGE_S:
        canary = run_canary(supervisor)
    checks.append(_canary_check(canary))
    checks += _warm_checks(supervisor, smolvm_ok=bool(canary.get("ok")), recheck=recheck)
    checks += ready_checks(supervisor)
    namespace_ok = all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "namespace canary"))
    engines = {"namespace": namespace_ok, "smolvm": canary_verdict(canary).ok}
    auto, conclusion = supervisor.registry.conclusion(engines)
    return {"checks": [asdict(c) for c in checks], "engines": engines, "auto": auto, "conclusion": conclusion}


def run_canary(supervisor: Supervisor) -> dict[str, Any]:
    """Boot a tiny microVM through the real engine and run a no-op in it; cache the verdict."""
    started = time.monotonic()
    result = supervisor.run(
        RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=Limits(wall_timeout_s=30, memory_mib=256))
    )
    record = canary_record(result, seconds=time.monotonic() - started)
    supervisor.registry.write_canary(record)
    return record


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


def run_warm_canary(supervisor: Supervisor) -> dict[str, Any]:
    """Build (or reuse) the python base at the canary's size, run the probe in two branches of it,
    check that they are fresh; cache the verdict, which CORDON_SMOLVM_WARM=auto follows."""
    from runner.engines.smolvm import SmolvmEngine

    engine = supervisor.registry.engines["smolvm"]
    assert isinstance(engine, SmolvmEngine)  # noqa: S101 - the registry builds it
    started = time.monotonic()
    saved = engine.warm
    engine.warm = dataclasses.replace(saved, mode="true")  # the canary decides what auto does
    try:
        record = engine.ensure_base(supervisor.images.resolve("python"), FRESHNESS_LIMITS)
        if record is None or record.state != "frozen":
            why = record.error if record is not None else "did not finish in time"
            figures: dict[str, Any] = {"ok": False, "problems": [f"the base was not built: {why}"]}
        else:
            runs = []
            for _ in range(2):
                before = time.time()
                result = supervisor.run(
                    RunSpec(runtime="python", script=FRESHNESS_PROBE, engine="smolvm", limits=FRESHNESS_LIMITS)
                )
                runs.append((result, before, time.time()))
            figures = freshness(runs)
            figures["branch_s"] = [r.timings.get("branch_s") for r, _, _ in runs]
            figures["boot_s"] = [r.timings.get("boot_s") for r, _, _ in runs]
            figures["base"] = record.name
    finally:
        engine.warm = saved
    reason = "two branches were fresh and on the host's clock" if figures["ok"] else "; ".join(figures["problems"])
    record_out = {
        "ok": figures["ok"],
        "reason": reason,
        "seconds": round(time.monotonic() - started, 2),
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": figures,
    }
    supervisor.registry.write_canary(record_out, warm=True)
    return record_out


def _warm_checks(supervisor: Supervisor, *, smolvm_ok: bool, recheck: bool) -> list[Check]:
    """Warm starts: the setting, the warm canary (run when smolvm boots here), and every base."""
    from runner.engines.smolvm import SmolvmEngine

    engine = supervisor.registry.engines.get("smolvm")
    if not isinstance(engine, SmolvmEngine):
        return []
    checks = []
    canary = read_json(supervisor.registry.warm_canary_path)
    if (
        smolvm_ok
        and engine.warm.mode != "false"
        and (recheck or canary is None or canary_age_s(canary) > CANARY_MAX_AGE_S)
    ):
        canary = run_warm_canary(supervisor)
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


def ready_checks(supervisor: Supervisor) -> list[Check]:
    """Ready sandboxes (runner.ready): the setting, and each class each worker process keeps, from
    what the live processes published. A class given up after failures in a row fails its check."""
    settings = supervisor.ready_settings
    if not settings.enabled:
        return [Check("ready sandboxes", True, "off (CORDON_READY=false): every run's sandbox is made for it")]
    pools = status_files(supervisor.paths.host_state_dir)
    held = sum(c["memory_bytes"] for pool in pools for c in pool["classes"]) // (1024 * 1024)
    summary = (
        f"on: each worker process keeps up to {settings.classes} classes ready, {settings.room_mib} MiB of room each, "
        f"never the last {settings.free_slots} free slot(s), made anew after {settings.max_age_s:g} s; "
        f"{len(pools)} process(es) with a pool, {held} MiB held by waiting interpreters"
    )
    checks = [Check("ready sandboxes", True, summary)]
    for pool in pools:
        for cls in pool["classes"]:
            detail = (
                f"process {pool['pid']}: {cls['ready']} ready, {cls['in_use']} in use, {cls['failures']} failures "
                f"in a row, {cls['memory_bytes'] // (1024 * 1024)} MiB held; made {pool['made']}, claimed "
                f"{pool['claimed']}, fell back cold {pool['fell_back']}"
            )
            checks.append(Check(f"ready {cls['class']}", not cls["stopped"], cls["stopped"] or detail))
    return checks


def _canary_check(canary: dict[str, Any]) -> Check:
    verdict = "passed" if canary.get("ok") else "FAILED"
    detail = f"{verdict} at {canary.get('at')} in {canary.get('seconds')} s: {canary.get('reason')}"
    return Check("smolvm canary boot", bool(canary.get("ok")), detail)


def _smolvm_engine() -> Check:
    installed = smolvm_installed()
    return Check("smolvm engine", installed.ok, installed.why)


def _bwrap() -> Check:
    path = shutil.which("bwrap")
    if path is None:
        return Check("bubblewrap", False, "not installed (apt-get install bubblewrap)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    userns = Path("/proc/sys/user/max_user_namespaces")
    limit = userns.read_text().strip() if userns.exists() else "unknown"
    if limit == "0":
        return Check("bubblewrap", False, f"{version}; user namespaces are disabled (user.max_user_namespaces=0)")
    return Check("bubblewrap", True, f"{version} at {path}; user.max_user_namespaces={limit}")


def _cgroups() -> Check:
    try:
        layout = CgroupLayout.detect()
    except RuntimeError as exc:
        return Check("cgroups", False, str(exc))
    kill = "cgroup.kill" if layout.version == 2 or layout.hybrid_v2 else "freezer (no cgroup.kill)"
    favor = favors_dynmods(layout)
    joins = {
        True: "cgroup2 mounted with favordynmods (cheap cgroup joins)",
        False: "cgroup2 without favordynmods: every run waits an RCU grace period to join its cgroups "
        "(make cgroup-tuning)",
        None: "no cgroup2 mount",
    }[favor]
    return Check("cgroups", True, f"{layout.describe()}; stop method {kill}; {joins}")


def _seccomp() -> Check:
    try:
        program = bpf_program()
    except Exception as exc:  # libseccomp missing or refusing: report, do not crash the doctor
        return Check("seccomp", False, f"cannot build the filter: {exc}")
    return Check("seccomp", True, f"deny-list filter built ({len(program)} bytes of BPF)")


def _images(store: ImageStore) -> list[Check]:
    checks = []
    for name in sorted(set(store.built()) | set(recipe_names(store.recipes_dir))):
        started = time.monotonic()
        report = store.verify(name)
        took = time.monotonic() - started
        if report.ok:
            checks.append(
                Check(f"image {name}", True, f"{report.digest} verified ({report.files_checked} paths, {took:.1f} s)")
            )
        else:
            checks.append(Check(f"image {name}", False, "; ".join(report.problems[:5])))
    return checks


KVM_FIX = "groupadd --system kvm; chgrp kvm /dev/kvm; chmod 0660 /dev/kvm (make run and make test do this)"


def _kvm() -> Check:
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


def _egress(supervisor: Supervisor) -> Check:
    """The site's egress ceiling, and whether a run's network namespace (loopback and its proxy's
    listener) can be made here: without one, a run with egress would end as a sandbox error."""
    ceiling = supervisor.egress.ceiling
    allowed = f"ceiling {', '.join(ceiling.to_json())}" if ceiling else "ceiling empty: no run has network"
    try:
        netns.create().close()
    except OSError as exc:
        return Check("egress", not ceiling, f"{allowed}; a run's network namespace cannot be made here: {exc}")
    return Check("egress", True, f"{allowed}; a run with egress gets a network namespace and proxy of its own")


def _namespace_canary(supervisor: Supervisor) -> Check:
    started = time.monotonic()
    result = supervisor.run(
        RunSpec(runtime="python", script=b"print('canary')", limits=Limits(wall_timeout_s=20), engine="namespace")
    )
    took = time.monotonic() - started
    ok = result.outcome is Outcome.SUCCEEDED and result.stdout == b"canary\n" and result.cleanup_ok
    cleanup = "ok" if result.cleanup_ok else "INCOMPLETE"
    detail = f"supervised run {result.outcome.value} in {took * 1000:.0f} ms, cleanup {cleanup}"
    if result.error:
        detail += f"; {result.error.code}: {result.error.message}"
    return Check("namespace canary", ok, detail)


def render(report: dict[str, Any]) -> str:
    lines = [f"{'ok  ' if c['ok'] else 'FAIL'}  {c['name']}: {c['detail']}" for c in report["checks"]]
    usable = [name for name, ok in report["engines"].items() if ok]
    lines.append(f"engines usable here: {', '.join(usable) or 'none'}")
    lines.append(f"conclusion: {report['conclusion']}")
    return "\n".join(lines)
