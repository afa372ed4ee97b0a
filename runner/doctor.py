"""`python -m runner doctor`: what this host can do, each claim backed by a check that ran."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.cgroups import CgroupLayout
from runner.images import ImageStore, read_lock
from runner.seccomp import bpf_program
from runner.spec import Limits, Outcome, RunSpec
from runner.supervisor import Supervisor


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def diagnose(supervisor: Supervisor | None = None) -> dict[str, Any]:
    supervisor = supervisor or Supervisor()
    checks = [_bwrap(), _cgroups(), _seccomp(), *_images(supervisor.images), _kvm()]
    if all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "image python")):
        checks.append(_namespace_canary(supervisor))
    namespace_ok = all(c.ok for c in checks if c.name in ("bubblewrap", "cgroups", "seccomp", "namespace canary"))
    return {
        "checks": [asdict(c) for c in checks],
        "engines": {"namespace": namespace_ok},
    }


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
    for name in sorted(read_lock(store.lock_path)):
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


def _kvm() -> Check:
    dev = Path("/dev/kvm")
    if not dev.exists():
        return Check("kvm", False, "/dev/kvm absent: the smolvm engine cannot run here")
    mode = stat.S_IMODE(dev.stat().st_mode)
    can_open = os.access(dev, os.R_OK | os.W_OK)
    return Check(
        "kvm", can_open, f"/dev/kvm present (mode {mode:o}); opening it proves nothing, only a canary boot does"
    )


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
    return "\n".join(lines)
