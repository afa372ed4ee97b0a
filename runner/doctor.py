"""`python -m runner doctor`: what this host can do, each claim backed by a check that ran."""

from __future__ import annotations

import grp
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.cgroups import CgroupLayout, favors_dynmods
from runner.images import ImageStore, recipe_names
from runner.registry import canary_age_s, canary_record, canary_verdict, smolvm_installed
from runner.seccomp import bpf_program
from runner.spec import Limits, Outcome, RunSpec
from runner.supervisor import Supervisor


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


CANARY_MAX_AGE_S = 6 * 3600


def diagnose(supervisor: Supervisor | None = None, *, recheck: bool = False) -> dict[str, Any]:
    supervisor = supervisor or Supervisor()
    checks = [_bwrap(), _cgroups(), _seccomp(), *_images(supervisor.images), _kvm(), _smolvm_engine()]
    if all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "image python")):
        checks.append(_namespace_canary(supervisor))
    canary = supervisor.registry.read_canary()
    if recheck or canary is None or canary_age_s(canary) > CANARY_MAX_AGE_S:
        canary = run_canary(supervisor)
    checks.append(_canary_check(canary))
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
