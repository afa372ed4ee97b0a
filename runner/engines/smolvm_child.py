"""The per-run child that drives one smolvm microVM through the SDK (local target).

`python -m runner.engines.smolvm_child CONFIG` — run by the supervisor inside the run's
cgroup, killed with it. The guest's stdout and stderr are relayed on this process's own
stdout and stderr; control facts (machine name, VM dir and uid, VMM pid, exit code, engine
errors with codes) go only to the control descriptor named in the config, which nothing in
the guest can reach. So a guest that prints a control message only prints text.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
from pathlib import Path

from runner.engines.smolvm_protocol import (
    ChildConfig,
    Deleted,
    DeleteFailed,
    Error,
    Event,
    Exit,
    Facts,
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
    from smol import ConnectOptions, ExecOptions, Machine, MachineConfig, MountSpec, ResourceSpec, SmolError

    name = config.name
    started = time.monotonic()
    control.say(Starting(facts=Facts(name=name, state_root=str(state_root))))
    machine = None
    try:
        try:
            machine = Machine.create(
                MachineConfig(
                    name=name,
                    image=config.image,
                    mounts=[MountSpec(source=m.source, target=m.target, read_only=m.read_only) for m in config.mounts],
                    resources=ResourceSpec(
                        cpus=config.cpus,
                        memory_mb=config.memory_mib,
                        network=False,
                        storage_gb=config.storage_gb,
                        overlay_gb=config.overlay_gb,
                    ),
                    network=False,
                    ready_timeout_seconds=config.boot_timeout_s,
                ),
                ConnectOptions(target="local"),
            )
        except SmolError as exc:
            code, retryable = classify_engine_error(exc.code, exc.message, phase="boot")
            control.say(Error(phase="boot", code=code, engine_code=exc.code, message=plain(exc.message),
                              retryable=retryable, facts=vm_facts(state_root, name)))  # fmt: skip
            return 3
        facts = vm_facts(state_root, name)
        facts = dataclasses.replace(facts, vm_uid=vmm_uid(facts) or None)
        user = hand_over_output(config.output_dir, config.user, facts.vm_uid or 0)
        control.say(Ready(boot_s=round(time.monotonic() - started, 3), vm_start="cold", facts=facts))
        stream = machine.exec_stream(
            config.argv,
            ExecOptions(
                env=config.env,
                workdir=config.workdir,
                user=user,
                timeout=config.exec_timeout_s,
            ),
        )
        for event in stream:
            kind = event.get("kind")
            if kind in ("stdout", "stderr"):
                write_all(1 if kind == "stdout" else 2, str(event.get("data", "")).encode("utf-8", "replace"))
            elif kind == "exit":
                control.say(Exit(exit_code=int(event["exit_code"])))
            elif kind == "error":
                control.say(Error(phase="exec", code="exec_error", message=str(event.get("message"))))
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
