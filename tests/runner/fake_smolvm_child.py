"""A stand-in for runner.engines.smolvm.child that boots nothing, for testing the engine's
plumbing on hosts without a bootable KVM: it prints, as the guest would, forged control
messages on stdout and stderr, and reports the real facts on the control descriptor.

As a base's keeper (`--keep CONFIG`) it does what the real keeper does around the VM: joins the
base's cgroup, takes the base's lock, holds the base's memory in the admission ledger, records
the base frozen (or failed, FAKE_KEEPER_MODE=fail) and stays until it is killed. With a base in
its config a run's child holds the base's lock shared, as the real one does, and reports a
branch (or, FAKE_CHILD_MODE=branch_fail, a failed branch and a cold boot). Given a hand-over
socket (a ready branch) it says it is ready, takes its run's program as the real one does, and
answers that the refresh went well (or, FAKE_CHILD_MODE=refresh_fail, that it failed)."""

import dataclasses
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

from runner.engines.smolvm.protocol import (
    BaseConfig,
    ChildConfig,
    Deleted,
    Error,
    Event,
    Exit,
    Facts,
    Ready,
    Starting,
    encode,
)

FORGED = '{"event":"error","code":"boot_failed","message":"forged by the guest","retryable":true}\n'


def via_proxy(request: str) -> str:
    """A request to the run's egress proxy from this process's network namespace, as the VMM opens
    a guest's socket: the proxy's status line."""
    import socket

    with socket.create_connection(("127.0.0.1", 3128), timeout=10) as conn:
        conn.sendall(request.encode())
        return conn.recv(200).decode().split("\r\n")[0]


def main(config_path: str) -> int:
    config = ChildConfig.from_json(Path(config_path).read_text())
    mode = os.environ.get("FAKE_CHILD_MODE", "forge")

    def say(event: Event) -> None:
        os.write(config.control_fd, encode(event))

    say(Starting(facts=Facts(name=config.name)))
    if mode == "boot_error":
        say(Error(phase="boot", code="boot_failed", message="no boot progress for 30 seconds", retryable=True))
        return 3
    ready = start(config, mode)
    if config.ready_fd is not None:
        handed = take_run(config, mode)
        if handed is None:
            return 0
        config = handed
    say(ready)
    if mode in ("sparse_output", "dense_output"):
        say(Exit(exit_code=write_oversize_output(Path(config.output_dir), sparse=mode == "sparse_output")))
        return 0
    if mode == "egress":  # where the VMM would run, and what the guest would be given and reach
        devices = Path("/proc/net/dev").read_text().splitlines()[2:]
        said = {
            "network": config.network, "env": config.env, "argv": config.argv,
            "floor": os.environ.get("SMOLVM_EGRESS_FLOOR"),
            "netns": os.readlink("/proc/self/ns/net"), "cold_reason": config.cold_reason,
            "interfaces": sorted(line.split(":")[0].strip() for line in devices),
            "proxy": via_proxy("GET http://elsewhere.example.org/ HTTP/1.1\r\nHost: elsewhere.example.org\r\n\r\n"),
        }  # fmt: skip
        os.write(1, json.dumps(said).encode())
        say(Exit(exit_code=0))
        return 0
    if mode == "echo":  # what the guest program would be given: its argv and what /job holds
        job = next(Path(m.source) for m in config.mounts if m.target == "/job")
        files = {p.name: p.read_text() for p in sorted(job.iterdir())}
        os.write(1, json.dumps({"argv": config.argv, "job": files}).encode())
        say(Exit(exit_code=0))
        return 0
    os.write(1, b"guest says hello\n" + FORGED.encode() + b'{"event":"exit","exit_code":99}\n')
    os.write(2, FORGED.encode())
    say(Exit(exit_code=0))
    say(Deleted())
    return 0


def take_run(config: ChildConfig, mode: str) -> ChildConfig | None:
    """A ready branch's hand-over (runner.engines.smolvm.child.take_run), nothing refreshed."""
    import socket

    end = socket.socket(fileno=config.ready_fd)
    end.send(json.dumps({"ready": True}).encode())
    message = end.recv(4 << 20)
    if not message:
        return None
    if mode == "refresh_fail":
        end.send(json.dumps({"problem": "refresh exited 1: fake"}).encode())
        return None
    end.send(json.dumps({"handed": True}).encode())
    order = json.loads(message)
    return dataclasses.replace(config, argv=order["argv"], env=order["env"], exec_timeout_s=order["exec_timeout_s"])


def start(config: ChildConfig, mode: str) -> Ready:
    """How the VM came to be: a branch of the given base (its lock held shared), or cold."""
    if not config.base or not config.base_lock:
        return Ready(boot_s=0.01, vm_start="cold", vm_note=config.cold_reason or None, cold_s=0.01)
    lock = os.open(config.base_lock, os.O_RDWR | os.O_CLOEXEC)  # held until this process exits
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return Ready(boot_s=0.01, vm_start="cold", vm_note="the warm start failed (the base is being removed)")
    if mode == "branch_fail":
        return Ready(boot_s=0.02, vm_start="cold", vm_note="the warm start failed (fake)", branch_s=0.01, cold_s=0.01)
    return Ready(boot_s=0.01, vm_start="branch", branch_s=0.004, mount_s=0.003, refresh_s=0.002, clock_skew_s=0.0)


def keep(config_path: str) -> int:
    config = BaseConfig.from_json(Path(config_path).read_text())
    for procs in config.cgroup_procs:
        Path(procs).write_text(str(os.getpid()))
    folder = Path(config.folder)
    lock = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    from runner.engines.smolvm.bases import Bases
    from runner.host.admission import Admission, Capacity

    bases = Bases(folder.parent)
    while (record := bases.read(config.name)) is None or record.keeper_pid != os.getpid():
        time.sleep(0.02)
    if os.environ.get("FAKE_KEEPER_MODE") == "fail":
        bases.write(dataclasses.replace(record, state="failed", error="SmolError: fake boot failure"))
        return 1
    capacity = Capacity(slots=1, memory_mib=config.memory_budget_mib, cpus=0.0, wait_s=0.0)
    Admission(Path(config.admission_dir), capacity).hold(config.name, memory_mib=config.admission_memory_mib)
    time.sleep(float(os.environ.get("FAKE_KEEPER_BUILD_S", "0.2")))  # the boot and the probe branch
    bases.write(dataclasses.replace(record, state="frozen", built_s=0.2))
    fcntl.flock(lock, fcntl.LOCK_UN)
    while True:
        signal.pause()


def write_oversize_output(area: Path, *, sparse: bool) -> int:
    """What the VMM does on the host for a guest writing /output/big past the cap (virtiofs
    passes the guest's ftruncate and writes through): returns the guest program's exit code."""
    with open(area / "big", "wb") as handle:
        if sparse:
            handle.truncate(2 << 30)
            return 0
        try:
            while True:
                handle.write(b"\1" * 65536)
                handle.flush()
        except OSError:  # ENOSPC: the guest program dies of it
            return 1


if __name__ == "__main__":
    sys.exit(keep(sys.argv[2]) if sys.argv[1] == "--keep" else main(sys.argv[1]))
