"""Host-side mechanics every engine shares: the lifecycle of a run held in its own cgroups
(`CgroupEngine`), the output area, stopping a run's cgroup, and auditing teardown."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from runner.cells import session_area_bytes
from runner.engines.base import Collected, Engine, HandOverError, Process, RunContext, RunState, Sample
from runner.host import hostfs
from runner.host.cgroups import CgroupLayout, RunCgroup, run_names
from runner.host.spawner import Spawner, SpawnError, Steps, join_cgroups
from runner.spec import MIB, CleanupCheck, Limits, RunnerError

# Room in the output area past the output cap. With none, ENOSPC would cut an oversize file off
# at exactly the cap, where it looks like a file within it (exported, silently truncated); with
# it, such a file is over the cap when export inspects it, and is refused and named. tmpfs counts
# whole pages, so this is at least one.
OUTPUT_AREA_SLACK_BYTES = 64 * 1024


@dataclass
class Peaks:
    """The highest figures the samples saw. The kernel keeps the peak of the whole memory cgroup
    only, not of the program's part of it, so the program's peak is worked out from both."""

    memory: int | None = None  # the program's own, at a sample
    files: int | None = None

    def add(self, memory: int | None, files: int | None) -> None:
        if memory is not None:
            self.memory = memory if self.memory is None else max(self.memory, memory)
        if files is not None:
            self.files = files if self.files is None else max(self.files, files)

    def program(self, cgroup_peak: int | None) -> int | None:
        """The program's peak: the cgroup's own peak less the most its files ever held (at the
        cgroup's peak they held no more), or the highest sample if that is higher. Neither counts
        more than the program had; the first also sees a peak between two samples (an OOM kill's)."""
        found = [m for m in (self.memory, program_bytes(cgroup_peak, self.files)) if m is not None]
        return max(found) if found else None


@dataclass
class CgroupState(RunState):
    """What every cgroup-held run has: its cgroups, and the read end of the pipe on which the
    engine's process reports (bwrap's JSON status, the smolvm child's control events)."""

    cgroup: RunCgroup
    control_fd: int | None = None
    # What the host itself put in the writable areas before the program started (the script):
    # its pages are charged to the supervisor, not to the run, and are not the program's files.
    files_at_start: int = 0
    peaks: Peaks = field(default_factory=Peaks)
    # CPU seconds the cgroup had used before the run was handed over (a ready sandbox's start).
    cpu_base_s: float = 0.0


StateT = TypeVar("StateT", bound=CgroupState)


@dataclass(frozen=True)
class Launch:
    """How an engine's process is started; `start` adds the pipes, the cgroups and the fds."""

    argv: list[str]
    env: dict[str, str]
    # Either: a sandbox launcher's steps as data (its limits and the slot's uid), done in the
    # child of the small spawner process (runner.host.spawner) after it joined the run's cgroups...
    drop: Drop | None = None
    # ...or what a child forked from the supervisor itself does once it is in the run's cgroups,
    # just before exec: plain syscalls only (no locks, no allocation-heavy work).
    before_exec: Callable[[], None] | None = None
    # The process's whole stdin (a sealed memfd); empty: /dev/null.
    stdin: bytes = b""


@dataclass(frozen=True)
class Drop:
    """A sandbox launcher's last steps before exec: rlimits, then the slot's unprivileged uid."""

    uid: int
    rlimits: list[tuple[int, int]]
    netns_fd: int = -1  # a network namespace the launcher joins first (runner.host.spawner.Steps)


class CgroupEngine(Engine, Generic[StateT]):
    """The lifecycle both engines share: the run's process starts inside the run's own cgroups,
    which are its accounting, its kill switch and its audit. A subclass says what is launched,
    how its control pipe reads, how the program ended, and what else teardown must audit."""

    state_type: type[StateT]
    # Whether the run's pids cgroup caps the program's own processes (a VM's guest processes
    # are capped inside the guest; its host pids cap bounds only the VMM's threads).
    process_cap_on_host: ClassVar[bool] = True
    # Whether the program writes its scratch to the host tmpfs at ctx.scratch_dir (a VM writes
    # to its own disks, which the host cannot see).
    scratch_on_host: ClassVar[bool] = True
    # Whether stop sends SIGTERM to the program and waits the grace before killing the cgroup.
    polite_stop: ClassVar[bool] = True

    def __init__(self, *, cgroup_parent: str, layout: CgroupLayout | None):
        self.cgroup_parent = cgroup_parent
        self.layout = layout or CgroupLayout.detect()

    def state(self, ctx: RunContext) -> StateT:
        """The run's state, made on first use (teardown may be the first, after a failed start)."""
        if ctx.state is None:
            ctx.state = self.state_type(cgroup=RunCgroup(self.layout, self.cgroup_parent, ctx.run_id))
        if not isinstance(ctx.state, self.state_type):
            raise TypeError(f"the {self.name} engine was handed another engine's run state")
        return ctx.state

    # what each engine says

    @abstractmethod
    def prepare_views(self, ctx: RunContext) -> None:
        """After the cgroups: the run's views, scratch and output area."""

    @abstractmethod
    def launch(self, ctx: RunContext, fds: dict[str, int]) -> Launch:
        """The engine's process. `fds` holds the control pipe's write end as "control"; every fd
        opened into it is inherited by the process and closed here once it has them (or if the
        start fails)."""

    @abstractmethod
    def exit_status(self, ctx: RunContext) -> tuple[int | None, int | None]:
        """(exit code, signal) of the program, after stop."""

    @abstractmethod
    def started(self, ctx: RunContext) -> bool:
        """Whether the program itself was started (not just the sandbox tooling)."""

    @abstractmethod
    def stray_processes(self, ctx: RunContext) -> list[int]:
        """Processes of the run found outside its cgroups, by the engine's own means."""

    @abstractmethod
    def strays_described(self, ctx: RunContext) -> str:
        """Where `stray_processes` looks, for the audit."""

    def tooling_pids(self, ctx: RunContext) -> set[int]:
        """The sandbox's own processes, spared the polite stop (they would take all down at once)."""
        return set()

    def engine_checks(self, ctx: RunContext) -> list[CleanupCheck]:
        """What else of the run teardown removes and audits, after its processes and cgroups."""
        return []

    # the lifecycle

    def prepare(self, ctx: RunContext) -> None:
        state = self.state(ctx)
        caps = self.cgroup_limits(ctx.limits, cell=ctx.spec.cell)
        state.cgroup.create(
            memory_bytes=caps.memory_bytes, pids_max=caps.pids_max, cpus=caps.cpus, cpu_weight=ctx.spec.cpu_weight
        )
        self.prepare_views(ctx)

    def start(self, ctx: RunContext) -> Process:
        state = self.state(ctx)
        state.files_at_start = areas_used_bytes(self.file_areas(ctx)) or 0
        control_read, control_write = os.pipe()
        fds = {"control": control_write}
        stdin = -1
        try:
            launch = self.launch(ctx, fds)
            stdin = stdin_fd(launch.stdin)
            if launch.drop is not None:
                process: Process = _spawn(launch, launch.drop, state.cgroup.procs_files, list(fds.values()), stdin)
            else:
                process = subprocess.Popen(
                    launch.argv,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=tuple(fds.values()),
                    preexec_fn=_in_cgroups(state.cgroup.procs_files, launch.before_exec or (lambda: None)),
                    env=launch.env,
                    cwd="/",
                )
        except BaseException:
            os.close(control_read)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
            if stdin >= 0:
                os.close(stdin)
        state.control_fd = control_read
        return process

    def set_cpu_weight(self, ctx: RunContext, cpu_weight: int) -> None:
        self.state(ctx).cgroup.set_cpu_weight(cpu_weight)

    def bind_run_limits(self, ctx: RunContext) -> None:
        """At a ready sandbox's hand-over: the run's own limits written to its cgroups and areas,
        which from now on bind (a class's room is not the run's). Raises HandOverError."""
        cgroup = self.state(ctx).cgroup
        if ctx.process is None or ctx.process.poll() is not None:
            raise HandOverError("its process had exited")
        if cgroup.oom_kills() or cgroup.pids_max_hits():
            raise HandOverError("it had hit its memory or process limit while it waited")
        caps = self.cgroup_limits(ctx.limits, cell=ctx.spec.cell)
        try:
            cgroup.set_limits(
                memory_bytes=caps.memory_bytes, pids_max=caps.pids_max, cpus=caps.cpus, cpu_weight=ctx.spec.cpu_weight
            )
            if self.scratch_on_host:
                hostfs.resize_tmpfs(ctx.scratch_dir, size_bytes=ctx.limits.disk_mib * MIB)
            hostfs.resize_tmpfs(
                ctx.output_dir,
                size_bytes=output_area_bytes(ctx.limits, cell=ctx.spec.cell),
                max_inodes=output_area_inodes(ctx.limits),
            )
        except OSError as exc:
            raise HandOverError(f"its limits could not be set: {exc}") from exc

    def control_fds(self, ctx: RunContext) -> list[int]:
        fd = None if ctx.state is None else self.state(ctx).control_fd
        return [] if fd is None else [fd]

    def sample(self, ctx: RunContext) -> Sample:
        state = self.state(ctx)
        cgroup = state.cgroup
        files = self._file_bytes(ctx, state)
        memory = None
        if self.files_in_memory_limit:
            memory = program_bytes(cgroup.memory_bytes(), files)
        state.peaks.add(memory, files)
        return Sample(self._cpu_seconds(state), memory, files, cgroup.oom_kills(), self._process_cap_hits(cgroup))

    def stop(self, ctx: RunContext, *, grace_s: float) -> str:
        if ctx.state is None:
            return "nothing to stop"
        grace = grace_s if self.polite_stop else 0.0
        method = stop_cgroup(self.state(ctx).cgroup, spare=self.tooling_pids(ctx), grace_s=grace)
        reap(ctx.process)
        return method

    def collect(self, ctx: RunContext) -> Collected:
        state = self.state(ctx)
        cgroup = state.cgroup
        exit_code, signo = self.exit_status(ctx)
        state.peaks.add(None, self._file_bytes(ctx, state))  # the files as the program left them
        cgroup_peak = cgroup.memory_peak_bytes()
        return Collected(
            exit_code=exit_code,
            signal=signo,
            cpu_s=self._cpu_seconds(state),
            peak_memory_bytes=state.peaks.program(cgroup_peak) if self.files_in_memory_limit else None,
            peak_file_bytes=state.peaks.files,
            cgroup_peak_memory_bytes=cgroup_peak,
            oom_kills=cgroup.oom_kills(),
            process_cap_hits=self._process_cap_hits(cgroup),
            scratch_full=area_full(ctx.scratch_dir) if self.scratch_on_host else False,
            output_area_full=area_full(ctx.output_dir),
            started=self.started(ctx),
        )

    def teardown(self, ctx: RunContext) -> list[CleanupCheck]:
        state = self.state(ctx)
        checks = cgroup_checks(state.cgroup, lambda: self.stray_processes(ctx), self.strays_described(ctx))
        if state.control_fd is not None:
            os.close(state.control_fd)
            state.control_fd = None
        checks.extend(self.engine_checks(ctx))
        checks.append(mounts_check(ctx))
        return checks

    def sweep(self, is_live: Callable[[str], bool]) -> list[str]:
        return sweep_cgroups(self.layout, self.cgroup_parent, is_live)

    @staticmethod
    def _cpu_seconds(state: CgroupState) -> float | None:
        used = state.cgroup.cpu_seconds()
        return None if used is None else max(0.0, used - state.cpu_base_s)

    def _process_cap_hits(self, cgroup: RunCgroup) -> int:
        return cgroup.pids_max_hits() if self.process_cap_on_host else 0

    def file_areas(self, ctx: RunContext) -> list[Path]:
        """The run's writable areas that are host tmpfs mounts: their pages are the run's memory."""
        return [ctx.scratch_dir, ctx.output_dir] if self.scratch_on_host else [ctx.output_dir]

    def _file_bytes(self, ctx: RunContext, state: CgroupState) -> int | None:
        held = areas_used_bytes(self.file_areas(ctx))
        return None if held is None else max(0, held - state.files_at_start)


def _spawn(launch: Launch, drop: Drop, procs_files: list[str], passed: list[int], stdin: int) -> Process:
    """Start a sandbox launcher through this process's spawner: `stdin` as its stdin, stdout and
    stderr pipes the supervisor reads, `passed` at their own numbers, nothing else open."""
    if any(fd <= 2 for fd in passed):
        raise RuntimeError(f"an fd to pass collides with the standard streams: {passed}")
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC)
    try:
        steps = Steps(cgroup_procs=procs_files, uid=drop.uid, rlimits=drop.rlimits, netns_fd=drop.netns_fd)
        fds = {0: stdin, 1: out_write, 2: err_write, **{fd: fd for fd in passed}}
        process = Spawner.here().spawn(launch.argv, env=launch.env, fds=fds, steps=steps)
    except BaseException as exc:
        os.close(out_read)
        os.close(err_read)
        if isinstance(exc, SpawnError):  # before the sandbox existed: ours, named by the launcher's step
            raise RunnerError(f"launcher_{exc.step}_failed", str(exc), retryable=True) from exc
        raise
    finally:
        for fd in (out_write, err_write):
            os.close(fd)
    process.stdout = open(out_read, "rb", buffering=0)  # noqa: SIM115 - closed with the run's pipes
    process.stderr = open(err_read, "rb", buffering=0)  # noqa: SIM115
    return process


def stdin_fd(data: bytes) -> int:
    """A process's stdin, close-on-exec here: /dev/null for none, else a memfd holding exactly
    `data`, sealed so that nothing, the program included, can change or resize it (memory only:
    nothing of it reaches a disk). Its offset is at the start."""
    if not data:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    fd = os.memfd_create("cordon-stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _in_cgroups(procs_files: list[str], then: Callable[[], None]) -> Callable[[], None]:
    """The forked child's first act: into the run's cgroups, so that nothing of the run ever
    executes outside them; then the engine's own steps."""

    def enter() -> None:
        join_cgroups(procs_files)
        then()

    return enter


def decode_exit_status(code: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from a reported exit status, where 128 + N means death by signal N
    (as bwrap's JSON status and smolvm's agent report it)."""
    if code is None:
        return None, None
    if 128 < code <= 128 + 64:
        return None, code - 128
    return code, None


def output_area_bytes(limits: Limits, *, cell: bool = False) -> int:
    """The size of a run's output area (a tmpfs, so also memory its cgroup must allow); a notebook
    cell's also holds its session files (runner.cells)."""
    return limits.output_max_bytes + OUTPUT_AREA_SLACK_BYTES + (session_area_bytes(limits) if cell else 0)


def mount_output_area(ctx: RunContext, *, uid: int, gid: int | None = None, mode: int = 0o700) -> None:
    """The run's one writable output area, the same size and shape in every engine. Export, on
    the host after exit, decides what of it leaves; the area only bounds what can be written."""
    ctx.output_dir.mkdir(mode=0o700)
    hostfs.mount_tmpfs(
        ctx.output_dir,
        size_bytes=output_area_bytes(ctx.limits, cell=ctx.spec.cell),
        uid=uid,
        gid=gid,
        mode=mode,
        max_inodes=output_area_inodes(ctx.limits),
    )


def output_area_inodes(limits: Limits) -> int:
    """Room for a few times the file cap, so "too many files" is seen and refused at export."""
    return limits.output_max_files * 4 + 64


def bind_views(ctx: RunContext, sources: dict[str, Path]) -> None:
    """Create the run's view directory and bind each source read-only at view/<name>."""
    ctx.view_dir.mkdir(mode=0o711, parents=True)
    for name, source in sources.items():
        (ctx.view_dir / name).mkdir(mode=0o755)
        hostfs.bind_readonly(source, ctx.view_dir / name)


def stop_cgroup(cgroup: RunCgroup, *, spare: Iterable[int], grace_s: float) -> str:
    """SIGTERM to every process but the `spare` tooling, wait `grace_s`, then kill the whole cgroup
    and verify it is empty. Returns how it ended: exited, SIGTERM, or the kill method."""
    method = "exited"
    polite = cgroup.pids() - set(spare)
    if polite and grace_s > 0:
        for pid in polite:
            signal_quietly(pid, signal.SIGTERM)
        method = "SIGTERM" if cgroup.wait_empty(grace_s) else cgroup.kill()
    elif cgroup.pids():
        method = cgroup.kill()
    if not cgroup.wait_empty(5.0):
        method = cgroup.kill()
        cgroup.wait_empty(5.0)
    return method


def cgroup_checks(cgroup: RunCgroup, strays: Callable[[], list[int]], who: str) -> list[CleanupCheck]:
    """Kill what is left in the run's cgroups, then audit: no process (in the cgroups, or found
    by `strays`, described by `who`), and every cgroup directory removed."""
    left = cgroup.pids()
    if left:
        cgroup.kill()
        cgroup.wait_empty(5.0)
        left = cgroup.pids()
    stray = strays()
    settle = time.monotonic() + 2.0
    while stray and time.monotonic() < settle:  # processes already dying leave the cgroup first
        time.sleep(0.02)
        stray = strays()
    ok = not left and not stray
    detail = f"no process left in the run's cgroups or {who}"
    if not ok:
        detail = f"cgroup pids left: {sorted(left)}; {who}: {stray}"
    remaining = cgroup.remove()
    removed = f"{len(cgroup.dirs)} cgroup directories removed"
    return [
        CleanupCheck("processes", ok, detail),
        CleanupCheck("cgroups", not remaining, f"not removed: {remaining}" if remaining else removed),
    ]


def mounts_check(ctx: RunContext) -> CleanupCheck:
    """Unmount everything below the run's view and staging directories, then remove the view."""
    errors = []
    for mount in hostfs.mounts_under(ctx.view_dir, ctx.run_dir):
        try:
            hostfs.unmount(mount)
        except OSError as exc:
            errors.append(str(exc))
    mounted = hostfs.mounts_under(ctx.view_dir, ctx.run_dir)
    if not mounted and ctx.view_dir.exists():
        # Only once nothing is mounted below: never recurse into a mount. What it could not remove
        # is reported below; a view already gone (a host's sweep got there first) is no failure.
        shutil.rmtree(ctx.view_dir, ignore_errors=True)
    ok = not mounted and not ctx.view_dir.exists()
    detail = "every view and tmpfs of the run unmounted; view directory removed"
    return CleanupCheck("mounts", ok, detail if ok else f"still mounted: {[str(m) for m in mounted]} {errors}")


def sweep_cgroups(layout: CgroupLayout, parent: str, is_live: Callable[[str], bool]) -> list[str]:
    swept = []
    for name in sorted(run_names(layout, parent)):
        if is_live(name):
            continue
        cgroup = RunCgroup(layout, parent, name)
        if cgroup.pids():
            cgroup.kill()
            cgroup.wait_empty(5.0)
        remaining = cgroup.remove()
        swept.append(f"cgroup {name}" + (f" (could not remove {remaining})" if remaining else ""))
    return swept


def processes_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by `uid`. A zombie has exited and holds nothing but its
    pid; exited helpers are reaped by the host's init in its own time."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def signal_quietly(pid: int, signo: int) -> None:
    try:
        os.kill(pid, signo)
    except ProcessLookupError:
        pass


def reap(process: Process | None) -> None:
    """Wait for the engine's own process after its cgroup was emptied; kill it if it lingers."""
    if process is None:
        return
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def program_bytes(charged: int | None, files: int | None) -> int | None:
    """The program's own memory: what its memory cgroup holds, less its files' tmpfs pages."""
    if charged is None or files is None:
        return None
    return max(0, charged - files)


def areas_used_bytes(areas: list[Path]) -> int | None:
    """Bytes the files in these tmpfs areas hold (whole pages, as they are charged); None if one
    cannot be read. One statfs each: cheap enough for every sample."""
    total = 0
    for area in areas:
        try:
            stats = os.statvfs(area)
        except OSError:
            return None
        total += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return total


def area_full(path: Path) -> bool:
    """Whether a run's tmpfs area is full (False when it cannot be read: unknown is not full)."""
    try:
        return hostfs.is_full(path)
    except OSError:
        return False
