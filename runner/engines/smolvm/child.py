"""The per-run child that drives one smolvm microVM through the SDK (local target), and the
keeper of a warm base.

`python -m runner.engines.smolvm.child CONFIG` — run by the supervisor inside the run's
cgroup, killed with it. With a base in its config it branches that frozen base (a warm start:
the run's own mounts added to the branch, fresh entropy and the host's clock set before the
program) and boots cold if anything of that fails. With a hand-over socket in its config it is
a ready branch (runner.ready): it branches and mounts, says so on the socket and waits; the run's
program comes as one message, the refresh is done then, its outcome answered on the socket, and
the program starts (a ready branch that fails is not booted cold: the pool counts the failure, and
the run starts cold instead). The guest's stdout and stderr are relayed on this process's own
stdout and stderr; control facts (machine name, VM dir and uid, VMM pid, exit code, engine
errors with codes) go only to the control descriptor named in the config, which nothing in
the guest can reach. So a guest that prints a control message only prints text.

`python -m runner.engines.smolvm.child --keep CONFIG` keeps one base (bases): it joins
the base's cgroup, builds the base, freezes it with a probe branch, records it and stays until
it is stopped; SIGTERM deletes the base.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from runner.engines.smolvm.protocol import (
    HAND_OVER_MAX_BYTES,
    READY_TIMINGS,
    BaseConfig,
    ChildConfig,
    Deleted,
    DeleteFailed,
    Error,
    Event,
    Exit,
    Facts,
    Mount,
    Ready,
    Starting,
    encode,
)

# Boot failures whose message says the guest never came up (as on hosts whose KVM cannot run
# a standard guest kernel), as opposed to configuration or host errors.
BOOT_FAILURE_MARKERS = ("wait for ready", "boot process exited", "no boot progress", "did not become ready")
KVM_FAILURE_MARKERS = ("KvmOpen", "KVM_UNAVAILABLE", "/dev/kvm")


def classify_engine_error(code: str, message: str, *, phase: str) -> tuple[str, bool]:
    """(Cordon's error code, retryable) for an SDK error."""
    if code in ("KVM_UNAVAILABLE", "HYPERVISOR_UNAVAILABLE") or any(m in message for m in KVM_FAILURE_MARKERS):
        return "kvm_unavailable", False
    if phase == "boot" and any(m in message for m in BOOT_FAILURE_MARKERS):
        return "boot_failed", True
    if code == "TIMEOUT" and phase == "boot":
        return "boot_failed", True
    return ("boot_error" if phase == "boot" else "exec_error"), True


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(message: str) -> str:
    """The engine's message without terminal colour codes."""
    return _ANSI.sub("", message)


class Control:
    def __init__(self, fd: int):
        self._fd = fd

    def say(self, event: Event) -> None:
        write_all(self._fd, encode(event))


def write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def vm_facts(state_root: Path, name: str) -> Facts:
    """Where smolvm put this machine: its VM dir, the per-VM uid and the VMM's pid, if present."""
    vms = state_root / ".cache" / "smolvm" / "vms"
    facts = Facts()
    for vm_dir in vms.iterdir() if vms.is_dir() else ():
        try:
            if (vm_dir / "name").read_text().strip() != name:
                continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        found = Facts(
            vm_dir=str(vm_dir), vm_uid=_number_in(vm_dir / ".vm-uid"), vmm_pid=_number_in(vm_dir / "agent.pid")
        )
        facts = facts.updated(found)
    return facts


def _number_in(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def vmm_uid(facts: Facts) -> int:
    """The uid the VMM runs as (smolvm's per-VM uid, gid equal), or 0 when it runs as root."""
    if facts.vm_uid:
        return facts.vm_uid
    if facts.vmm_pid is None:
        return 0
    try:
        return os.stat(f"/proc/{facts.vmm_pid}").st_uid
    except OSError:
        return 0


def hand_over_output(output_dir: str, guest_user: str, uid: int) -> str:
    """Give the (size-capped) output area to the guest user and return the user to run as.

    virtiofs serves a guest's file operation with the guest caller's credentials: the VMM
    switches to the caller's uid and gid for it, which a VMM dropped to a per-VM uid can only
    do for its own. Measured under emulated KVM: the guest user 1000 got EACCES, and with the
    VMM's group EPERM, writing /output. So with per-VM uids the job runs as the VMM's uid and
    gid (smolvm gives each the same number) and the area is theirs, mode 0770: nobody else on
    the host can write there. When the VMM runs as root (SMOLVM_VM_UID_DROP=off, harness
    only), it can act as anyone, so the job keeps the configured user and the area is its.
    """
    if uid:
        os.chown(output_dir, uid, uid)
        return f"{uid}:{uid}"
    guest_uid, guest_gid = (int(part) for part in guest_user.split(":"))
    os.chown(output_dir, guest_uid, guest_gid)
    return guest_user


# Fresh entropy and the host's clock in a branch, as the guest's root, before the program runs:
# RNDADDENTROPY credits the host's seed to the guest's pool and RNDRESEEDCRNG re-keys the CRNG
# at once (a branch starts with its base's CRNG state; smolvm's own urandom write is not
# credited), then the clock is set to the host's to the nanosecond and read back.
REFRESH = r"""open(my $f, ">", "/dev/urandom") or die "open: $!"; my $s = pack("H*", $ARGV[0]);
ioctl($f, 0x40085203, pack("ii", 8 * length($s), length($s)) . $s) or die "RNDADDENTROPY: $!";
ioctl($f, 0x5207, 0) or die "RNDRESEEDCRNG: $!";
system("/usr/bin/date", "-u", "-s", "\@$ARGV[1]") == 0 or die "date -s failed";
print `/usr/bin/date +%s.%N`;"""
MAX_CLOCK_SKEW_S = 1.0
REFRESH_TIMEOUT_S = 30.0
PRELOAD = (
    "/usr/bin/perl -e 1; /usr/bin/date > /dev/null; "
    "if [ -x /usr/bin/python3 ]; then /usr/bin/python3 -c 'import json, os, random, time'; fi; "
    "if [ -x /usr/bin/node ]; then /usr/bin/node -e 0; fi; true"
)
MOUNT_TIMEOUT_S = 30.0


class WarmStartFailed(Exception):
    """A step of the warm start failed; the run boots cold instead."""


def processes_serving(vm_dir: str) -> list[int]:
    """Processes whose command line names this VM's directory (its VMM)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if vm_dir.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def cgroup_of(pid: int | str) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text().strip()


def add_mount(vmm_cli: Path, name: str, mount: Mount) -> None:
    volume = f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")
    proc = subprocess.run(
        [str(vmm_cli), "machine", "mount", "add", "--name", name, "-v", volume, "--error-format", "json"],
        capture_output=True, text=True, timeout=MOUNT_TIMEOUT_S, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise WarmStartFailed(f"mount add {mount.target}: {plain(proc.stderr.strip())[-300:]}")


def refresh(machine: Any, exec_options: Any) -> tuple[float, float]:
    """Reseed the branch's CRNG from the host and set its clock; (seconds taken, guest-host skew)."""
    started, before = time.monotonic(), time.time()
    seed = os.urandom(64).hex()
    result = machine.exec(["/usr/bin/perl", "-e", REFRESH, seed, f"{time.time():.9f}"], exec_options)
    after = time.time()
    if result.exit_code != 0:
        raise WarmStartFailed(f"refresh exited {result.exit_code}: {plain(result.stderr.strip())[-300:]}")
    try:
        guest = float(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise WarmStartFailed(f"refresh printed no time: {result.stdout[-200:]!r}") from None
    # The guest read its clock between `before` and `after` on the host's: outside that window by
    # more than the bound, the clock is wrong.
    skew = guest - before if guest < before else (guest - after if guest > after else 0.0)
    if abs(skew) > MAX_CLOCK_SKEW_S:
        raise WarmStartFailed(f"the guest clock is {skew:+.3f} s off the host's after the refresh")
    return time.monotonic() - started, round(skew, 3)


def warm_start(config: ChildConfig, smol: Any, timings: dict[str, float], *, fresh: bool = True) -> tuple[Any, str]:
    """Branch the base, give the branch this run's mounts, refresh it (`fresh`: a ready branch is
    refreshed at hand-over); (the machine, guest user). Raises WarmStartFailed (or the SDK's error)
    with the branch deleted by the caller."""
    if not config.base or not config.base_lock:
        raise WarmStartFailed("no base")
    lock = os.open(config.base_lock, os.O_RDWR | os.O_CLOEXEC)  # held shared while this run lives
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise WarmStartFailed("the base is being built or removed") from None
    local = smol.ConnectOptions(target="local")
    started = time.monotonic()
    machine = smol.Machine.open(config.base, local).branch(config.name, freeze_source=True)
    timings["branch_s"] = round(time.monotonic() - started, 3)
    facts = vm_facts(Path(config.state_root), config.name)
    vmms = processes_serving(facts.vm_dir) if facts.vm_dir else []
    outside = [pid for pid in vmms if cgroup_of(pid) != cgroup_of("self")]
    if not vmms or outside:
        # The run's limits and its audit are its cgroup's: a VMM outside it would escape both.
        raise WarmStartFailed(f"the branch's VMM is not in the run's cgroup (VMM {vmms}, outside {outside})")
    user = hand_over_output(config.output_dir, config.user, vmm_uid(facts))
    vmm_cli = Path(config.sdk_path or "") / "smol" / "smol-vmm"

    def mounts() -> float:
        started = time.monotonic()
        for mount in config.mounts:
            add_mount(vmm_cli, config.name, mount)
        return time.monotonic() - started

    if not fresh:
        timings["mount_s"] = round(mounts(), 3)
        return machine, user
    # The mounts (through the VMM's control socket) and the refresh (through the guest's agent)
    # are independent: the program starts once both are done.
    with ThreadPoolExecutor(max_workers=2) as pool:
        mounted = pool.submit(mounts)
        refreshed = pool.submit(refresh, machine, smol.ExecOptions(timeout=REFRESH_TIMEOUT_S))
        timings["mount_s"] = round(mounted.result(), 3)
        took, skew = refreshed.result()
    timings["refresh_s"], timings["clock_skew_s"] = round(took, 3), skew
    return machine, user


def take_run(
    end: socket.socket, config: ChildConfig, machine: Any, smol: Any, timings: dict[str, float]
) -> ChildConfig | None:
    """A ready branch: say it is ready, wait for its run, refresh the guest then (entropy and clock
    as of the hand-over, not the making) and answer; the config with the run's program, or None
    when the socket closed first or the refresh failed (said on the socket: the run starts cold)."""
    end.send(json.dumps({"ready": True}).encode())
    message = end.recv(HAND_OVER_MAX_BYTES)
    if not message:
        return None
    order = json.loads(message)
    try:
        took, skew = refresh(machine, smol.ExecOptions(timeout=REFRESH_TIMEOUT_S))
    except (WarmStartFailed, smol.SmolError) as exc:
        end.send(json.dumps({"problem": plain(getattr(exc, "message", None) or str(exc))[-300:]}).encode())
        return None
    timings["refresh_s"], timings["clock_skew_s"] = round(took, 3), skew
    end.send(json.dumps({"handed": True, "refresh_s": round(took, 3)}).encode())
    return dataclasses.replace(
        config, argv=list(order["argv"]), env=dict(order["env"]), exec_timeout_s=float(order["exec_timeout_s"])
    )


def drop_branch(smol: Any, name: str) -> str:
    """Delete a failed branch before the cold boot takes its name; '' when it is gone."""
    try:
        smol.Machine.delete_by_name(name, smol.ConnectOptions(target="local"))
        smol.Machine.open(name, smol.ConnectOptions(target="local"))
    except smol.SmolError as exc:
        return "" if exc.code == "NOT_FOUND" else plain(exc.message)[-300:]
    return "still listed after its delete"


def cold_start(config: ChildConfig, smol: Any) -> Any:
    """A machine booted for this run alone, with its mounts."""
    return smol.Machine.create(
        smol.MachineConfig(
            name=config.name,
            image=config.image,
            mounts=[smol.MountSpec(source=m.source, target=m.target, read_only=m.read_only) for m in config.mounts],
            resources=smol.ResourceSpec(
                cpus=config.cpus,
                memory_mb=config.memory_mib,
                network=config.network,
                storage_gb=config.storage_gb,
                overlay_gb=config.overlay_gb,
            ),
            network=config.network,
            ready_timeout_seconds=config.boot_timeout_s,
        ),
        smol.ConnectOptions(target="local"),
    )


def main(config_path: str) -> int:
    config = ChildConfig.from_json(Path(config_path).read_text())
    control = Control(config.control_fd)
    state_root = Path(config.state_root)
    os.environ.pop("SMOL_CLOUD_TOKEN", None)
    os.environ["HOME"] = str(state_root)  # the SDK keeps its state under $HOME
    # Stopping is the supervisor's: SIGTERM unwinds into the finally below, which deletes the VM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if config.sdk_path:
        sys.path.insert(0, config.sdk_path)  # the copy the per-VM uid can reach, not the venv's
    import smol
    from smol import ExecOptions, SmolError

    name = config.name
    started = time.monotonic()
    control.say(Starting(facts=Facts(name=name, state_root=str(state_root))))
    machine = None
    timings: dict[str, float] = {}
    note, vm_start, user = config.cold_reason, "cold", config.user
    end = socket.socket(fileno=config.ready_fd) if config.ready_fd is not None else None
    try:
        if config.base:
            try:
                machine, user = warm_start(config, smol, timings, fresh=end is None)
                vm_start, note = "branch", ""
            except (WarmStartFailed, SmolError, OSError, subprocess.SubprocessError) as exc:
                reason = plain(getattr(exc, "message", None) or str(exc))[-300:]
                left = drop_branch(smol, name)
                if end is not None:  # a ready branch is a branch or nothing: the pool counts it
                    end.send(
                        json.dumps({"problem": f"its branch failed ({reason}){'; ' + left if left else ''}"}).encode()
                    )
                    return 3
                if left:  # never boot a second machine under a name whose first is still there
                    message = f"the warm start failed ({reason}) and its branch remains: {left}"
                    control.say(Error(phase="boot", code="branch_failed", message=message, retryable=True))
                    return 3
                timings = {k: v for k, v in timings.items() if k == "branch_s"}
                note = f"the warm start failed ({reason})"
        if machine is None:
            cold = time.monotonic()
            try:
                machine = cold_start(config, smol)
            except SmolError as exc:
                code, retryable = classify_engine_error(exc.code, exc.message, phase="boot")
                control.say(Error(phase="boot", code=code, engine_code=exc.code, message=plain(exc.message),
                                  retryable=retryable, facts=vm_facts(state_root, name)))  # fmt: skip
                return 3
            timings["cold_s"] = round(time.monotonic() - cold, 3)
        if end is not None:
            handed = take_run(end, config, machine, smol, timings)
            if handed is None:
                return 0  # not taken (or its refresh failed): the machine is deleted below
            config, started = handed, time.monotonic()  # the run's VM start is from its hand-over
        facts = vm_facts(state_root, name)
        if vm_start == "cold":
            facts = dataclasses.replace(facts, vm_uid=vmm_uid(facts) or None)
            user = hand_over_output(config.output_dir, config.user, facts.vm_uid or 0)
        # A branch runs as its base's per-VM uid, shared with the base and its siblings: that uid
        # is not this run's to audit (its VMM is found by its name and in the run's cgroup).
        boot_s = round(time.monotonic() - started, 3)
        phases = {name: timings.get(name) for name in READY_TIMINGS}
        control.say(Ready(boot_s=boot_s, vm_start=vm_start, vm_note=note or None, facts=facts, **phases))
        relay(machine.exec_stream(config.argv, ExecOptions(
            env=config.env, workdir=config.workdir, user=user, timeout=config.exec_timeout_s,
        )), control)  # fmt: skip
        return 0
    except SmolError as exc:
        code, retryable = classify_engine_error(exc.code, exc.message, phase="exec")
        control.say(
            Error(phase="exec", code=code, engine_code=exc.code, message=plain(exc.message), retryable=retryable)
        )
        return 3
    finally:
        if machine is not None:
            try:
                machine.delete()
                control.say(Deleted())
            except SmolError as exc:
                control.say(DeleteFailed(message=exc.message))


def relay(stream: Any, control: Control) -> None:
    """The program's output to this process's stdout and stderr (the supervisor's pipes, which it
    caps), and its exit or the exec's error to the supervisor."""
    for event in stream:
        kind = event.get("kind")
        if kind in ("stdout", "stderr"):
            write_all(1 if kind == "stdout" else 2, str(event.get("data", "")).encode("utf-8", "replace"))
        elif kind == "exit":
            control.say(Exit(exit_code=int(event["exit_code"])))
        elif kind == "error":
            control.say(Error(phase="exec", code="exec_error", message=str(event.get("message"))))


def keep(config_path: str) -> int:
    """Build a base, freeze it, record it, and keep it until stopped (see the module's doc)."""
    config = BaseConfig.from_json(Path(config_path).read_text())
    for procs in config.cgroup_procs:  # first: the VMM it starts is charged to the base
        Path(procs).write_text(str(os.getpid()))
    folder = Path(config.folder)
    lock = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another keeper has it
    from runner.engines.smolvm.bases import Bases
    from runner.host.admission import Admission, Capacity

    os.environ.pop("SMOL_CLOUD_TOKEN", None)
    os.environ["HOME"] = config.state_root
    bases = Bases(folder.parent)
    started, record = time.monotonic(), None
    while time.monotonic() - started < 10.0:  # the engine records this keeper once it has its pid
        record = bases.read(config.name)
        if record is not None and record.keeper_pid == os.getpid():
            break
        time.sleep(0.05)
    else:
        print(f"base {config.name}: no record names this keeper", file=sys.stderr, flush=True)
        return 1
    stopping = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        capacity = Capacity(slots=1, memory_mib=config.memory_budget_mib, cpus=0.0, wait_s=0.0)
        Admission(Path(config.admission_dir), capacity).hold(config.name, memory_mib=config.admission_memory_mib)
        if config.sdk_path:
            sys.path.insert(0, config.sdk_path)
        import smol

        local = smol.ConnectOptions(target="local")
        resources = smol.ResourceSpec(cpus=config.cpus, memory_mb=config.memory_mib, network=False,
                                      storage_gb=config.storage_gb, overlay_gb=config.overlay_gb)  # fmt: skip
        base = smol.Machine.create(
            smol.MachineConfig(name=config.name, image=config.image, mounts=[], resources=resources, network=False,
                               branchable=True, persistent=True, detach=True,
                               ready_timeout_seconds=config.boot_timeout_s),
            local,
        )  # fmt: skip
        # Load the image's interpreters (and the refresh's perl) once, so that every branch starts
        # with them in its page cache; Cordon's own fixed command, no user code or file.
        base.exec(["/bin/sh", "-c", PRELOAD], smol.ExecOptions(timeout=max(60.0, config.boot_timeout_s)))
        probe = base.branch(config.name + "-probe", freeze_source=True)  # freezes the base: it never runs again
        probe.delete()
        bases.write(dataclasses.replace(record, state="frozen", built_s=round(time.monotonic() - started, 2)))
        fcntl.flock(lock, fcntl.LOCK_UN)  # runs may branch it now (each holding the lock shared)
        print(json.dumps({"frozen": config.name, "built_s": round(time.monotonic() - started, 2)}), flush=True)
        while True:
            signal.pause()
    except Exception as exc:  # any failure is the base's, recorded; then it goes
        message = plain(getattr(exc, "message", None) or str(exc))
        bases.write(dataclasses.replace(record, state="failed", error=f"{type(exc).__name__}: {message}"[:2000]))
        print(f"base {config.name} failed: {message}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, stopping)
        delete_base(config)


def delete_base(config: BaseConfig) -> None:
    """Delete the base's machines, its probe first (a frozen base outlives no branch of it)."""
    vmm_cli = Path(config.sdk_path or "") / "smol" / "smol-vmm"
    for name in (config.name + "-probe", config.name):
        subprocess.run([str(vmm_cli), "machine", "delete", "--name", name, "-f"], capture_output=True,
                       timeout=60, check=False)  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "--keep":
        sys.exit(keep(sys.argv[2]))
    sys.exit(main(sys.argv[1]))
