"""Host-side mechanics every engine shares: the output area, stopping a run's cgroup, and
auditing teardown."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from runner import hostfs
from runner.cgroups import CgroupLayout, RunCgroup, run_names
from runner.engines.base import RunContext
from runner.spec import CleanupCheck, Limits

# Room in the output area past the output cap. With none, ENOSPC would cut an oversize file off
# at exactly the cap, where it looks like a file within it (exported, silently truncated); with
# it, such a file is over the cap when export inspects it, and is refused and named. tmpfs counts
# whole pages, so this is at least one.
OUTPUT_AREA_SLACK_BYTES = 64 * 1024


def join_cgroups(procs_files: list[str]) -> None:
    """In a forked child before exec: move this process into the run's cgroups (plain syscalls
    only), so that nothing of the run ever executes outside them."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)


def output_area_bytes(limits: Limits) -> int:
    """The size of a run's output area (a tmpfs, so also memory its cgroup must allow)."""
    return limits.output_max_bytes + OUTPUT_AREA_SLACK_BYTES


def mount_output_area(ctx: RunContext, *, uid: int, gid: int | None = None, mode: int = 0o700) -> None:
    """The run's one writable output area, the same size and shape in every engine. Export, on
    the host after exit, decides what of it leaves; the area only bounds what can be written."""
    ctx.output_dir.mkdir(mode=0o700)
    # Room for a few times the file cap, so "too many files" is seen and refused at export.
    inodes = ctx.limits.output_max_files * 4 + 64
    hostfs.mount_tmpfs(
        ctx.output_dir, size_bytes=output_area_bytes(ctx.limits), uid=uid, gid=gid, mode=mode, max_inodes=inodes
    )


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
    for directory in (ctx.view_dir, ctx.run_dir):
        for mount in hostfs.mounts_under(directory):
            try:
                hostfs.unmount(mount)
            except OSError as exc:
                errors.append(str(exc))
    mounted = hostfs.mounts_under(ctx.view_dir) + hostfs.mounts_under(ctx.run_dir)
    if not mounted and ctx.view_dir.exists():
        shutil.rmtree(ctx.view_dir)  # only once nothing is mounted below: never recurse into a mount
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


def reap(process: subprocess.Popen[bytes] | None) -> None:
    """Wait for the engine's own process after its cgroup was emptied; kill it if it lingers."""
    if process is None:
        return
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def area_full(path: Path) -> bool:
    """Whether a run's tmpfs area is full (False when it cannot be read: unknown is not full)."""
    try:
        return hostfs.is_full(path)
    except OSError:
        return False
