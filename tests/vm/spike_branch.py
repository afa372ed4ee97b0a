"""Spike for issue 17 (warm microVMs): can a frozen smolvm base be branched under the emulated host?

Run inside the emulated host of `make test-vm` (as root), with the state root, runtime copy and
environment the smolvm engine uses there: `python -m tests.vm --script tests/vm/spike_branch.py`.
Every step is guarded: a failure is printed in full and the script goes on with what still makes
sense. The findings are the product: it exits 0 whatever they are (non-zero only on a crash).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from runner.config import paths_from_env
from runner.engines.smolvm.child import vm_facts
from runner.engines.smolvm.engine import PASSTHROUGH, SmolvmEngine
from runner.host import hostfs
from runner.images import ImageStore

STATE_ROOT = Path(os.environ.get("CORDON_SMOLVM_STATE_DIR", "/var/lib/cordon/smolvm"))
SPIKE = STATE_ROOT.parent / "views" / "spike"
BASE, BRANCHES = "cordonbase-spike", ("cordon-spike-a", "cordon-spike-b", "cordon-spike-c")
READS = (
    "head -c 32 /dev/urandom | od -An -tx1 | tr -d '\\n'; echo; "
    "python3 -c 'import os,random;print(os.urandom(16).hex(), random.random())'; date +%s.%N; "
    "echo uptime $(cat /proc/uptime) boot_id $(cat /proc/sys/kernel/random/boot_id) "
    "machine_id $(cat /etc/machine-id 2>&1) hostname $(hostname)"
)
RESEED = r"""open(my $f,">","/dev/urandom") or die "open: $!"; my $s=pack("H*",$ARGV[0]);
ioctl($f,0x40085203,pack("ii",8*length($s),length($s)).$s) or die "add:$!";
ioctl($f,0x5207,0) or die "reseed:$!";
system("/usr/bin/date","-u","-s","\@$ARGV[1]")==0 or die "date failed";
print "reseeded; guest time now ", `date +%s.%N`"""
EXEC_TIMEOUT_S = 60.0

engine = SmolvmEngine(
    state_root=STATE_ROOT,
    boot_timeout_s=150.0,
    extra_env={k: v for k, v in os.environ.items() if k in PASSTHROUGH},
)


def say(text: str = "") -> None:
    print(text, flush=True)


def describe(exc: BaseException) -> str:
    fields = {k: getattr(exc, k, None) for k in ("code", "status", "problem_code", "retryable", "retry_after_s")}
    known = {k: v for k, v in fields.items() if v is not None}
    return f"{type(exc).__module__}.{type(exc).__name__} {known} message={getattr(exc, 'message', str(exc))!r}"


def step(title: str, fn: Callable[[], Any]) -> Any:
    """Run one guarded step: its time, and any failure in full. None when it failed."""
    say(f"\n=== {title}")
    started = time.monotonic()
    try:
        result = fn()
    except BaseException as exc:  # the spike reports everything and goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        say(f"--- {title}: FAILED after {time.monotonic() - started:.2f} s: {describe(exc)}")
        say(traceback.format_exc().rstrip())
        return None
    say(f"--- {title}: ok in {time.monotonic() - started:.2f} s")
    return result if result is not None else True


def sh(command: str) -> str:
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)
    return (proc.stdout + proc.stderr).rstrip()


def cli(*args: str) -> tuple[int, str, str]:
    started = time.monotonic()
    rc, out, err = engine.cli(*args, timeout=120.0)
    say(f"$ smol-vmm {' '.join(args)}  -> rc {rc} in {time.monotonic() - started:.2f} s")
    for label, text in (("stdout", out), ("stderr", err)):
        if text.strip():
            say(f"  {label}: {text.strip()[-3000:]}")
    return rc, out, err


# --- 1. facts of the emulated host ------------------------------------------------------------


def l1_facts() -> None:
    clock = Path("/sys/devices/system/clocksource/clocksource0")
    say(f"current clocksource: {(clock / 'current_clocksource').read_text().strip()}")
    say(f"available clocksources: {(clock / 'available_clocksource').read_text().strip()}")
    say("dmesg | grep -i -E 'tsc|clocksource' | tail -n 25:")
    say(sh("dmesg | grep -i -E 'tsc|clocksource' | tail -n 25"))
    say(f"/dev/userfaultfd: {sh('ls -l /dev/userfaultfd 2>&1')}")
    say(f"vm.unprivileged_userfaultfd: {sh('cat /proc/sys/vm/unprivileged_userfaultfd 2>&1')}")
    kvm_amd = "/sys/module/kvm_amd/parameters"
    say(f"kvm_amd: nested={sh(f'cat {kvm_amd}/nested')} npt={sh(f'cat {kvm_amd}/npt')}")
    flags = "grep -m1 -o -w -E 'tsc|constant_tsc|nonstop_tsc|tsc_scale|rdtscp|svm' /proc/cpuinfo | sort -u"
    say(f"cpu flags (tsc-related): {' '.join(sh(flags).split())}")
    say(sh("grep -E 'MemTotal|MemAvailable' /proc/meminfo"))
    say(f"uname: {sh('uname -r')}; smolvm env: " + json.dumps({k: v for k, v in os.environ.items() if "SMOLVM" in k}))


def kvm_clock_probe() -> None:
    """KVM_GET_CLOCK on a fresh VM with one vCPU: its flags say whether KVM_CLOCK_REALTIME (4) and
    KVM_CLOCK_TSC_STABLE (2) are offered here (the master clock; libkrun's snapshot wants REALTIME)."""
    kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    try:
        say(f"KVM_CHECK_EXTENSION(KVM_CAP_ADJUST_CLOCK) = {fcntl.ioctl(kvm, 0xAE03, 39)}")
        vm = fcntl.ioctl(kvm, 0xAE01, 0)
        try:
            vcpu = fcntl.ioctl(vm, 0xAE41, 0)
            data = bytearray(48)
            fcntl.ioctl(vm, 0x8030AE7C, data)
            clock, flags = int.from_bytes(data[0:8], "little"), int.from_bytes(data[8:12], "little")
            names = [n for bit, n in ((2, "TSC_STABLE"), (4, "REALTIME"), (8, "HOST_TSC")) if flags & bit]
            say(f"KVM_GET_CLOCK (1 vCPU, never run): clock={clock} flags={flags:#x} {names}")
            os.close(vcpu)
        finally:
            os.close(vm)
    finally:
        os.close(kvm)


# --- the SDK, as the engine's child sets it up -------------------------------------------------

for key, value in engine.child_env().items():
    os.environ[key] = value
sys.path.insert(0, str(engine.runtime().parent))  # the runtime copy's smol, as the child imports it
from smol import ConnectOptions, ExecOptions, Machine, MachineConfig, ResourceSpec, SmolError  # noqa: E402

LOCAL = ConnectOptions(target="local")


def image_view() -> Path:
    """The python image's verified rootfs, bound read-only as prepare_views does for a run."""
    ref = ImageStore(paths_from_env()).resolve("python")
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(STATE_ROOT, 0o755)  # noqa: S103 - as prepare_views
    root = SPIKE / "root"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(SPIKE, 0o711)  # noqa: S103 - as bind_views
    hostfs.bind_readonly(ref.rootfs, root)
    say(f"image python {ref.digest[:19]}: {ref.rootfs} bound read-only at {root}")
    return root


def create_base(root: Path) -> Any:
    config = MachineConfig(
        name=BASE,
        image=str(root),
        mounts=[],
        resources=ResourceSpec(cpus=1, memory_mb=512, network=False, storage_gb=1, overlay_gb=1),
        network=False,
        branchable=True,
        ready_timeout_seconds=150.0,
    )
    started = time.monotonic()
    machine = Machine.create(config, LOCAL)
    say(f"TIMING cold create of the branchable base: {time.monotonic() - started:.2f} s")
    show_facts(BASE)
    return machine


def show_facts(name: str) -> None:
    facts = vm_facts(STATE_ROOT, name)
    say(f"facts {name}: vm_dir={facts.vm_dir} vm_uid={facts.vm_uid} vmm_pid={facts.vmm_pid}")
    if facts.vm_dir:
        say(sh(f"ls -la {facts.vm_dir} | head -n 40"))


def run(machine: Any, argv: list[str], label: str) -> Any:
    started = time.monotonic()
    result = machine.exec(argv, ExecOptions(timeout=EXEC_TIMEOUT_S))
    say(f"[{label}] exit {result.exit_code} in {time.monotonic() - started:.2f} s")
    for line in result.stdout.rstrip().splitlines():
        say(f"[{label}] out: {line}")
    for line in result.stderr.rstrip().splitlines():
        say(f"[{label}] err: {line}")
    return result


def base_probe(base: Any) -> None:
    probe = (
        "grep -E '^(Uid|Cap)' /proc/self/status; ls -d /storage/overlays/*/merged 2>&1; uname -r; id; "
        "echo uptime $(cat /proc/uptime) boot_id $(cat /proc/sys/kernel/random/boot_id) date $(date +%s.%N)"
    )
    run(base, ["/bin/sh", "-c", probe], "base")


def branch(base: Any, name: str) -> Any:
    started = time.monotonic()
    try:
        clone = base.branch(name, freeze_source=True)
    except SmolError as exc:
        if "headroom" not in exc.message:
            raise
        say(f"branch refused by smolvm's memory admission ({describe(exc)}); again with it off")
        os.environ["SMOLVM_BRANCH_MEMORY_ADMISSION"] = "0"
        clone = base.branch(name, freeze_source=True)
    say(f"TIMING branch {name} (freeze_source=True, until ready): {time.monotonic() - started:.2f} s")
    show_facts(name)
    vm_dir = vm_facts(STATE_ROOT, name).vm_dir
    if vm_dir:
        say(f"{name} agent-startup-error.log: {sh(f'cat {vm_dir}/agent-startup-error.log')}")
        say(sh(f"grep -i -E 'rejuven|clock|snapshot|restor|fork' {vm_dir}/agent-console.log | tail -n 15"))
    return clone


def reads(machine: Any, label: str) -> dict[str, Any]:
    before = time.time()
    result = run(machine, ["/bin/sh", "-c", READS], label)
    after = time.time()
    lines = result.stdout.strip().splitlines()
    found: dict[str, Any] = {"urandom": lines[0].strip() if lines else None}
    found["python"] = lines[1].strip() if len(lines) > 1 else None
    try:
        guest = float(lines[2])
        found["skew_s"] = round(guest - (before + after) / 2, 3)
        say(f"[{label}] guest clock {guest:.3f}, host {before:.3f}..{after:.3f}: skew {found['skew_s']:+.3f} s")
    except (IndexError, ValueError):
        found["skew_s"] = None
    found["identity"] = lines[3].strip() if len(lines) > 3 else None
    return found


def compare(results: dict[str, dict[str, Any]], what: str) -> None:
    if len(results) < 2:
        say(f"COMPARE {what}: only {sorted(results)} have results")
        return
    for key in ("urandom", "python"):
        values = [r[key] for r in results.values()]
        verdict = "all different" if len(set(values)) == len(values) else "SOME IDENTICAL"
        say(f"COMPARE {what} {key}: {verdict} across {len(values)} branches")
    for name, r in results.items():
        say(f"COMPARE {what} {name}: skew {r['skew_s']} s; {r.get('identity')}")


def reseed(machine: Any, label: str) -> None:
    caps = "grep -E '^Cap(Eff|Bnd)' /proc/self/status"
    run(machine, ["/bin/sh", "-c", caps], f"{label} caps")
    seed, at = os.urandom(64).hex(), f"{time.time():.9f}"
    result = run(machine, ["/usr/bin/perl", "-e", RESEED, seed, at], f"{label} reseed")
    say(f"[{label} reseed] {'SUCCEEDED' if result.exit_code == 0 else 'FAILED'}")


def mounts(clone: Any) -> None:
    inside, job, outside = SPIKE / "in", SPIKE / "job", SPIKE / "out"
    for folder in (inside, job, outside):
        folder.mkdir(exist_ok=True)
    (inside / "hello.txt").write_text("input from the host\n")
    (job / "main.py").write_text("print('job script')\n")
    os.chmod(outside, 0o777)  # noqa: S103 - the guest writes as root and as 1000
    name = BRANCHES[0]
    total = time.monotonic()
    for volume in (f"{inside}:/input:ro", f"{job}:/job:ro", f"{outside}:/output"):
        started = time.monotonic()
        rc, _, _ = cli("machine", "mount", "add", "--name", name, "-v", volume)
        say(f"TIMING mount add {volume}: rc {rc} in {time.monotonic() - started:.2f} s")
    say(f"TIMING three mount adds: {time.monotonic() - total:.2f} s")
    cli("machine", "mount", "ls", "--name", name)
    check = (
        "grep -E ' /(input|output) ' /proc/mounts; cat /input/hello.txt; "
        "touch /input/probe && echo 'INPUT WRITABLE' || echo 'input read-only (write refused)'; "
        "echo from-guest-root > /output/root.txt && echo wrote /output/root.txt; ls -la /input /output"
    )
    run(clone, ["/bin/sh", "-c", check], "mounts")
    as_user = "echo from-guest-1000 > /output/user.txt && echo wrote /output/user.txt; id"
    result = clone.exec(["/bin/sh", "-c", as_user], ExecOptions(timeout=EXEC_TIMEOUT_S, user="1000:1000"))
    say(f"[mounts as 1000] exit {result.exit_code}: {result.stdout.strip()} {result.stderr.strip()}")
    for written in ("root.txt", "user.txt"):
        path = outside / written
        said = repr(path.read_text()) if path.exists() else "MISSING"
        say(f"host sees {path}: {said}")
    say(f"host sees in {inside}: {sorted(p.name for p in inside.iterdir())}")
    run(clone, ["/bin/sh", "-c", "python3 /job/main.py; touch /job/x || echo job read-only"], "job")
    rc, _, _ = cli("machine", "mount", "rm", "--name", name, "--target", "/output")
    if rc != 0:
        cli("machine", "mount", "rm", "--help")
    run(clone, ["/bin/sh", "-c", "grep -E ' /(input|job|output) ' /proc/mounts; ls /output"], "after mount rm")


def memory() -> None:
    """RSS and PSS of every VMM (the branches map the base's RAM copy-on-write), and the snapshot."""
    for name in (BASE, *BRANCHES):
        facts = vm_facts(STATE_ROOT, name)
        if facts.vmm_pid:
            rollup = sh(
                f"grep -E '^(Rss|Pss|Shared_Clean|Shared_Dirty|Private_Dirty):' /proc/{facts.vmm_pid}/smaps_rollup"
            )
            say(f"{name} vmm {facts.vmm_pid}: {' '.join(rollup.split())}")
    vm_dir = vm_facts(STATE_ROOT, BASE).vm_dir
    say(sh(f"du -sh {vm_dir}/s/* 2>&1; ls -la {vm_dir}/s/* 2>&1 | head -n 20"))
    say(sh("grep -E 'MemAvailable' /proc/meminfo"))


def cleanup(machines: dict[str, Any]) -> None:
    for name in [*BRANCHES, BASE]:  # branches before their base
        machine = machines.get(name)
        if machine is not None:
            step(f"delete {name} (SDK)", machine.delete)
        cli("machine", "delete", "--name", name, "-f")
    rc, out, _ = cli("machine", "ls", "--json")
    say(f"machines left: {[m.get('name') for m in json.loads(out or '[]')] if rc == 0 else 'unknown'}")
    vms = STATE_ROOT / ".cache" / "smolvm" / "vms"
    say(f"vm dirs left: {sorted(p.name for p in vms.iterdir()) if vms.is_dir() else []}")
    say(f"VMM processes left: {[engine.vmm_processes(n) for n in (*BRANCHES, BASE)]}")
    say(sh("ps -eo pid,ppid,comm,args | grep -E 'smol|libkrun|VM:' | grep -v grep || true"))


def main() -> int:
    step("1. L1 facts", l1_facts)
    step("1b. KVM clock flags", kvm_clock_probe)
    root = step("image view", image_view)
    machines: dict[str, Any] = {}
    try:
        base = step("2. create the branchable base", lambda: create_base(root)) if root else None
        if base is None:
            say("no base: nothing to branch")
            return 0
        machines[BASE] = base
        step("2b. probe the base before it is frozen", lambda: base_probe(base))
        first: dict[str, dict[str, Any]] = {}
        for name in BRANCHES:
            clone = step(f"3. branch {name}", partial(branch, base, name))
            if clone is None:
                step("3x. machine list after the failed branch", lambda: cli("machine", "ls", "--json"))
                continue
            machines[name] = clone
            got = step(f"4. first reads in {name}", partial(reads, clone, name))
            if isinstance(got, dict):
                first[name] = got
        step("3b. machine states", lambda: say(sh(f"{engine.runtime()}/smol-vmm machine ls 2>/dev/null")))
        step("3c. memory of the VMMs", memory)
        compare(first, "first reads")
        second: dict[str, dict[str, Any]] = {}
        for name in BRANCHES:
            if name in machines:
                step(f"5. reseed and set the clock in {name}", partial(reseed, machines[name], name))
                got = step(f"5b. reads after reseed in {name}", partial(reads, machines[name], name))
                if isinstance(got, dict):
                    second[name] = got
        compare(second, "after reseed")
        if BRANCHES[0] in machines:
            step("6. per-run mounts with `machine mount add`", lambda: mounts(machines[BRANCHES[0]]))
    finally:
        step("7. delete branches, then the base", lambda: cleanup(machines))
        step("unmount the image view", lambda: hostfs.unmount(SPIKE / "root"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
