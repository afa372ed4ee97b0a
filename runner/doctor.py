"""`python -m runner doctor`: what this host can do, each claim backed by a check that ran."""

from __future__ import annotations

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

from runner.cgroups import CgroupLayout
from runner.images import ImageStore, recipe_names
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
    canary = supervisor.read_canary()
    if recheck or canary is None or _age_s(canary) > CANARY_MAX_AGE_S:
        canary = run_canary(supervisor)
    checks.append(_canary_check(canary))
    namespace_ok = all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "namespace canary"))
    engines = {"namespace": namespace_ok, "smolvm": bool(canary.get("ok"))}
    auto = "smolvm" if engines["smolvm"] else "namespace"
    if supervisor.settings.require_vm and auto != "smolvm":
        conclusion = "require_vm is set and no microVM can boot here: runs are refused"
    elif auto == "smolvm":
        conclusion = "runs use the smolvm engine (isolation vm)"
    else:
        conclusion = (
            "runs use the namespace engine (isolation namespace, shared kernel): this host's KVM "
            "cannot boot a microVM guest"
        )
    return {"checks": [asdict(c) for c in checks], "engines": engines, "auto": auto, "conclusion": conclusion}


def run_canary(supervisor: Supervisor) -> dict[str, Any]:
    """Boot a tiny microVM through the real engine and run a no-op in it; cache the verdict."""
    started = time.monotonic()
    result = supervisor.run(
        RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=Limits(wall_timeout_s=30, memory_mib=256))
    )
    ok = result.outcome is Outcome.SUCCEEDED and result.cleanup_ok
    if ok:
        reason = f"booted in {result.timings.get('boot_s', 0):.1f} s and ran python3"
    elif result.error is not None:
        reason = f"{result.error.code}: {result.error.message}"
    else:
        reason = f"{result.outcome.value}: {result.reason}"
    record = {
        "ok": ok,
        "reason": reason,
        "seconds": round(time.monotonic() - started, 2),
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine_version": result.engine_version,
        "cleanup_ok": result.cleanup_ok,
    }
    path = supervisor.canary_path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return record


def _age_s(canary: dict[str, Any]) -> float:
    try:
        at = datetime.strptime(str(canary.get("at")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - at).total_seconds()


def _canary_check(canary: dict[str, Any]) -> Check:
    verdict = "passed" if canary.get("ok") else "FAILED"
    detail = f"{verdict} at {canary.get('at')} in {canary.get('seconds')} s: {canary.get('reason')}"
    return Check("smolvm canary boot", bool(canary.get("ok")), detail)


def _smolvm_engine() -> Check:
    from runner.engines.smolvm import component_hashes, engine_version, wheel_dir

    if wheel_dir() is None:
        return Check("smolvm engine", False, "the smolmachines wheel is not installed")
    hashes = ", ".join(f"{name} {digest[:16]}" for name, digest in component_hashes().items())
    return Check("smolvm engine", True, f"{engine_version()}; sha256: {hashes}")


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
    return Check("cgroups", True, f"{layout.describe()}; stop method {kill}")


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
