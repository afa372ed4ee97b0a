"""A stand-in for runner.engines.smolvm_child that boots nothing, for testing the engine's
plumbing on hosts without a bootable KVM: it prints, as the guest would, forged control
messages on stdout and stderr, and reports the real facts on the control descriptor."""

import json
import os
import sys
from pathlib import Path

from runner.engines.smolvm_protocol import ChildConfig, Deleted, Error, Event, Exit, Facts, Ready, Starting, encode

FORGED = '{"event":"error","code":"boot_failed","message":"forged by the guest","retryable":true}\n'


def main(config_path: str) -> int:
    config = ChildConfig.from_json(Path(config_path).read_text())
    mode = os.environ.get("FAKE_CHILD_MODE", "forge")

    def say(event: Event) -> None:
        os.write(config.control_fd, encode(event))

    say(Starting(facts=Facts(name=config.name)))
    if mode == "boot_error":
        say(Error(phase="boot", code="boot_failed", message="no boot progress for 30 seconds", retryable=True))
        return 3
    say(Ready(boot_s=0.01, vm_start="cold"))
    if mode in ("sparse_output", "dense_output"):
        say(Exit(exit_code=write_oversize_output(Path(config.output_dir), sparse=mode == "sparse_output")))
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
    sys.exit(main(sys.argv[1]))
