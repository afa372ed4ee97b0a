"""A run as the guest sees it: the child's configuration (the machine, its mounts, the program
and its environment), the program's argv under the guest's own caps, and its stdin beside the
script. The engine (engine.py) and a ready branch's hand-over use these."""

from __future__ import annotations

import os
from pathlib import Path

from runner.engines.base import RunContext, run_env
from runner.engines.smolvm.protocol import ChildConfig, Mount
from runner.engines.smolvm.runtime import OVERLAY_GB, storage_gb

GUEST_WORKDIR = "/tmp"
MACHINE_PREFIX = "cordon-"
GUEST_UID = "1000:1000"


def machine_name(run_id: str) -> str:
    return f"{MACHINE_PREFIX}{run_id}"


def child_config(
    ctx: RunContext,
    *,
    state_root: Path,
    boot_timeout_s: float,
    control_fd: int,
    sdk_dir: Path | None = None,
    base: str | None = None,
    base_lock: Path | None = None,
    cold_reason: str = "",
    ready_fd: int | None = None,
) -> ChildConfig:
    """What the child needs to create, run and delete the machine."""
    limits = ctx.limits
    return ChildConfig(
        sdk_path=str(sdk_dir.parent) if sdk_dir else None,
        name=machine_name(ctx.run_id),
        state_root=str(state_root),
        image=str(ctx.view_dir / "root"),
        cpus=max(1, round(limits.cpus)),
        memory_mib=limits.memory_mib,
        storage_gb=storage_gb(limits),
        overlay_gb=OVERLAY_GB,
        mounts=[
            Mount(str(ctx.view_dir / "in"), "/input", read_only=True),
            Mount(str(ctx.scratch_dir), "/job", read_only=True),
            Mount(str(ctx.output_dir), "/output", read_only=False),
        ],
        output_dir=str(ctx.output_dir),
        argv=guest_argv(ctx),
        env=run_env(ctx),
        network=ctx.egress is not None,
        user=GUEST_UID,
        workdir=GUEST_WORKDIR,
        # The guest's own timeout is a backstop; the supervisor's deadline on the host decides.
        exec_timeout_s=limits.wall_timeout_s + 5.0,
        boot_timeout_s=boot_timeout_s,
        control_fd=control_fd,
        base=base,
        base_lock=str(base_lock) if base_lock else None,
        cold_reason=cold_reason,
        ready_fd=ready_fd,
    )


# A run's stdin, written beside the script in /job (read-only) and given to the program by the
# guest's shell: smolvm's agent hands a streamed command no stdin (ExecOptions.stdin reached the
# program empty under make test-vm). The shell's script is this constant; the program and its
# arguments reach it as positional parameters, never parsed as shell text.
STDIN_NAME = "stdin"
STDIN_REDIRECT = ["/bin/sh", "-c", f'exec "$@" < /job/{STDIN_NAME}', "sh"]


def guest_argv(ctx: RunContext) -> list[str]:
    """The program with exactly Cordon's guest environment (the agent's container adds its own,
    e.g. TERM; the namespace engine's job sees guest_env and PWD, so this one does too), under
    an in-guest process cap (the guest kernel has no pids cgroup for it), its stdin from /job."""
    env = [f"{key}={value}" for key, value in sorted({**run_env(ctx), "PWD": GUEST_WORKDIR}.items())]
    redirect = STDIN_REDIRECT if ctx.spec.stdin else []
    return [
        "/usr/bin/env", "-i", *env,
        "/usr/bin/prlimit", f"--nproc={ctx.limits.max_processes}", "--core=0", "--", *redirect, *ctx.argv,
    ]  # fmt: skip


def write_stdin(ctx: RunContext) -> None:
    """A run's stdin, beside its script in /job (STDIN_REDIRECT)."""
    if ctx.spec.stdin:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(ctx.scratch_dir / STDIN_NAME, flags, 0o444), "wb") as handle:
            handle.write(ctx.spec.stdin)
