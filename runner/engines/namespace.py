"""The `namespace` engine: bubblewrap + cgroups + rlimits + seccomp, on the host's kernel.

Launch: the supervisor forks; the child joins the run's cgroups, sets rlimits, raises its
OOM score and drops to the slot's unprivileged host uid, then execs bwrap, which builds
fresh user/pid/ipc/uts/net namespaces around a read-only image rootfs. Every directory is
handed to bwrap as an fd, so the sandbox uid needs no access to the host paths above them.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Callable

from runner import hostfs
from runner.cgroups import CgroupLayout, RunCgroup
from runner.engines.base import GUEST_ENV, CgroupLimits, Collected, Engine, RunContext, Sample
from runner.engines.common import (
    area_full,
    bind_views,
    cgroup_checks,
    join_cgroups,
    mount_output_area,
    mounts_check,
    output_area_bytes,
    processes_of_uid,
    reap,
    stop_cgroup,
    sweep_cgroups,
)
from runner.seccomp import bpf_fd
from runner.spec import MIB, CleanupCheck, Limits, RunnerError

SHM_BYTES = 8 * MIB
SANDBOX_UID_INSIDE = 1000


class NamespaceEngine(Engine):
    name = "namespace"
    isolation = "namespace"

    def __init__(self, *, cgroup_parent: str = "cordon", layout: CgroupLayout | None = None):
        self.cgroup_parent = cgroup_parent
        self.layout = layout or CgroupLayout.detect()
        self.bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"

    def version(self) -> str:
        out = subprocess.run([self.bwrap, "--version"], capture_output=True, text=True, check=False).stdout
        return out.strip() or "bubblewrap (unknown version)"

    def cgroup_limits(self, limits: Limits) -> CgroupLimits:
        # The run's memory cgroup also carries its tmpfs areas, so they are added on top.
        memory = (limits.memory_mib + limits.disk_mib) * MIB + output_area_bytes(limits) + SHM_BYTES
        return CgroupLimits(
            memory_bytes=memory,
            pids_max=limits.max_processes + 2,  # + bwrap and its init
            cpus=limits.cpus,
        )

    # prepare / start

    def prepare(self, ctx: RunContext) -> None:
        cgroup = RunCgroup(self.layout, self.cgroup_parent, ctx.run_id)
        ctx.state["cgroup"] = cgroup
        caps = self.cgroup_limits(ctx.limits)
        cgroup.create(memory_bytes=caps.memory_bytes, pids_max=caps.pids_max, cpus=caps.cpus)
        bind_views(ctx, {"root": ctx.image.rootfs, "in": ctx.input_dir})
        ctx.scratch_dir.mkdir(mode=0o700)
        hostfs.mount_tmpfs(ctx.scratch_dir, size_bytes=ctx.limits.disk_mib * MIB, uid=ctx.uid)
        mount_output_area(ctx, uid=ctx.uid)

    def start(self, ctx: RunContext) -> subprocess.Popen[bytes]:
        cgroup: RunCgroup = ctx.state["cgroup"]
        fds: dict[str, int] = {}
        status_read, status_write = os.pipe()
        try:
            fds["root"] = os.open(ctx.view_dir / "root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            fds["input"] = os.open(ctx.view_dir / "in", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            fds["scratch"] = os.open(ctx.scratch_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            fds["output"] = os.open(ctx.output_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            fds["seccomp"] = bpf_fd()
            fds["status"] = status_write
            argv = bwrap_argv(self.bwrap, fds, ctx.argv)
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=tuple(fds.values()),
                preexec_fn=_launcher(cgroup.procs_files, ctx.uid, rlimits(ctx)),
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        ctx.state["status_fd"] = status_read
        ctx.state["status"] = b""
        return process

    def control_fds(self, ctx: RunContext) -> list[int]:
        return [ctx.state["status_fd"]] if "status_fd" in ctx.state else []

    def on_control(self, ctx: RunContext, fd: int, data: bytes) -> None:
        ctx.state["status"] = (ctx.state["status"] + data)[-65536:]

    # while it runs

    def sample(self, ctx: RunContext) -> Sample:
        cgroup: RunCgroup = ctx.state["cgroup"]
        return Sample(cgroup.cpu_seconds(), cgroup.memory_bytes(), cgroup.oom_kills(), cgroup.pids_max_hits())

    # stop / collect

    def stop(self, ctx: RunContext, *, grace_s: float) -> str:
        cgroup: RunCgroup | None = ctx.state.get("cgroup")
        if cgroup is None:
            return "nothing to stop"
        # Polite first, to the program only: bwrap and its init would take everything down at once.
        status = _parse_status(ctx.state.get("status", b""))
        tooling = {ctx.process.pid if ctx.process else -1, status.get("child-pid", -1)}
        method = stop_cgroup(cgroup, spare=tooling, grace_s=grace_s)
        reap(ctx.process)
        return method

    def collect(self, ctx: RunContext) -> Collected:
        cgroup: RunCgroup = ctx.state["cgroup"]
        status = _parse_status(ctx.state.get("status", b""))
        returncode = ctx.process.returncode if ctx.process else None
        exit_code, signo = _exit_status(returncode, status)
        return Collected(
            exit_code=exit_code,
            signal=signo,
            cpu_s=cgroup.cpu_seconds(),
            peak_memory_bytes=cgroup.memory_peak_bytes(),
            oom_kills=cgroup.oom_kills(),
            process_cap_hits=cgroup.pids_max_hits(),
            scratch_full=area_full(ctx.scratch_dir),
            output_area_full=area_full(ctx.output_dir),
            started="child-pid" in status,
        )

    # teardown / sweep

    def teardown(self, ctx: RunContext) -> list[CleanupCheck]:
        cgroup: RunCgroup = ctx.state.get("cgroup") or RunCgroup(self.layout, self.cgroup_parent, ctx.run_id)
        checks = cgroup_checks(cgroup, lambda: processes_of_uid(ctx.uid), f"as uid {ctx.uid}")
        fd = ctx.state.pop("status_fd", None)
        if fd is not None:
            os.close(fd)
        checks.append(mounts_check(ctx))
        return checks

    def sweep(self, is_live: Callable[[str], bool]) -> list[str]:
        return sweep_cgroups(self.layout, self.cgroup_parent, is_live)


def bwrap_argv(bwrap: str, fds: dict[str, int], program: list[str]) -> list[str]:
    """The bwrap command line, in a fixed, reviewed order. Directories come in as fds."""
    argv = [
        bwrap,
        "--unshare-user", "--uid", str(SANDBOX_UID_INSIDE), "--gid", str(SANDBOX_UID_INSIDE),
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
        "--disable-userns", "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--ro-bind-fd", str(fds["root"]), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--bind-fd", str(fds["scratch"]), "/tmp",
        "--ro-bind-fd", str(fds["input"]), "/input",
        "--bind-fd", str(fds["output"]), "/output",
        "--clearenv",
    ]  # fmt: skip
    for key, value in GUEST_ENV.items():
        argv += ["--setenv", key, value]
    argv += [
        "--chdir", "/tmp",
        "--seccomp", str(fds["seccomp"]),
        "--json-status-fd", str(fds["status"]),
        "--", *program,
    ]  # fmt: skip
    return argv


def rlimits(ctx: RunContext) -> list[tuple[int, int]]:
    return [
        (resource.RLIMIT_CORE, 0),
        # No file size limit: every writable place is a size-capped tmpfs, which bounds real bytes,
        # while a file size limit only refuses an apparent size (a sparse file costs nothing) and,
        # refusing, destroys the evidence: the program sees EFBIG (or dies of SIGXFSZ) and leaves
        # an empty file, so an oversize output looked like the program's own failure. Unlimited,
        # the file exists at its size and export refuses and names it, as in a microVM.
        (resource.RLIMIT_FSIZE, resource.RLIM_INFINITY),
        (resource.RLIMIT_NOFILE, 1024),
        # Counted per host uid, exited helpers awaiting the host init's reaping included: a wide
        # backstop, so that the pids cgroup, which leaves evidence, always bites first.
        (resource.RLIMIT_NPROC, ctx.limits.max_processes * 4 + 256),
    ]


def _launcher(procs_files: list[str], uid: int, limits: list[tuple[int, int]]) -> Callable[[], None]:
    """Runs in the forked child before exec: only plain syscalls, no locks, no allocation-heavy work."""

    def enter() -> None:
        join_cgroups(procs_files)
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")
        os.close(fd)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return enter


def _parse_status(raw: bytes) -> dict[str, int]:
    """bwrap's --json-status-fd stream: JSON objects such as {"child-pid": N}, {"exit-code": N}."""
    status: dict[str, int] = {}
    decoder = json.JSONDecoder()
    text = raw.decode(errors="replace")
    index = 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        try:
            obj, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            break
        if isinstance(obj, dict):
            status.update({k: v for k, v in obj.items() if isinstance(v, int)})
    return status


def _exit_status(returncode: int | None, status: dict[str, int]) -> tuple[int | None, int | None]:
    """(exit code, signal) of the program. bwrap reports a signal death as 128 + signo."""
    code = status.get("exit-code", returncode)
    if code is None:
        return None, None
    if code < 0:
        return None, -code  # bwrap itself was killed (by the supervisor)
    if 128 < code <= 128 + 64:
        return None, code - 128
    return code, None


def check_available() -> tuple[bool, str]:
    if shutil.which("bwrap") is None:
        return False, "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        CgroupLayout.detect()
    except RuntimeError as exc:
        return False, str(exc)
    return True, "bubblewrap and cgroups present"


__all__ = ["NamespaceEngine", "RunnerError", "bwrap_argv", "check_available"]
