"""Host upkeep, apart from any run: checking at start-up that the sandboxes' uid reaches where
their sandboxes are made, starting what the engines keep between runs as a worker starts, and
sweeping what crashed supervisors left (cgroups, mounts, directories, stale locks) and what the
engines keep that no run uses. A worker, the CLI and the doctor ask for these."""

from __future__ import annotations

import shutil

from runner.env import ConfigError
from runner.host import hostfs
from runner.host.locks import RunLock
from runner.supervisor import Supervisor


def check_sandbox_paths(supervisor: Supervisor) -> None:
    """Refuse to go on (ConfigError, the directory named) when a sandbox's uid cannot reach a
    directory its sandbox is made in: every run's setup would fail. Asked at start-up (a
    worker's, the CLI's) and by the doctor; one process as that uid, so not once per run."""
    uid = supervisor.settings.uid_base
    paths = {path for engine in supervisor.engines.values() for path in engine.sandbox_uid_paths(supervisor.views_dir)}
    for path in sorted(paths):
        blocked = hostfs.untraversable(path, uid)
        if blocked is not None:
            st = blocked.stat()
            raise ConfigError(
                f"the sandboxes' uid ({uid} and up) cannot enter {blocked} (mode {st.st_mode & 0o7777:04o}, "
                f"owner uid {st.st_uid}), on the way to {path}: every run's sandbox would fail to set up. "
                f"Let others traverse it (chmod o+x {blocked}) or set CORDON_HOST_STATE_DIR elsewhere"
            )


def sweep_bases(supervisor: Supervisor) -> list[str]:
    """Remove what the engines keep between runs and no run is using (`runner sweep --bases`)."""
    return [line for engine in supervisor.engines.values() for line in engine.sweep_kept()]


def warm_up(supervisor: Supervisor) -> list[str]:
    """Start making what the engines keep between runs, as a worker starts (what was started)."""
    return [name for engine in supervisor.engines.values() for name in engine.warm_up(supervisor.images)]


def sweep(supervisor: Supervisor) -> list[str]:
    """Reclaim what crashed supervisors left: cgroups, mounts and directories of dead runs."""
    swept: list[str] = []

    def is_live(run_id: str) -> bool:
        # Asked at the moment of each decision, not from a snapshot: a run takes its lock
        # before it creates anything, so whatever exists under a held lock is live.
        return RunLock(supervisor.locks_dir, run_id).is_held()

    for engine in supervisor.engines.values():
        swept.extend(engine.sweep(is_live))
    view_roots = {engine.view_root(supervisor.views_dir) for engine in supervisor.engines.values()}
    places = [(root, "view") for root in sorted(view_roots)] + [(supervisor.runs_dir, "run directory")]
    for directory, what in places:
        for entry in sorted(directory.iterdir()) if directory.is_dir() else ():
            if entry.is_dir() and not is_live(entry.name):
                for mount in hostfs.mounts_under(entry):
                    hostfs.unmount(mount)
                if not hostfs.mounts_under(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                swept.append(f"{what} {entry.name}")
    for lock in sorted(supervisor.locks_dir.glob("*.lock")):
        RunLock(supervisor.locks_dir, lock.name.removesuffix(".lock")).remove_if_stale()
    return swept
