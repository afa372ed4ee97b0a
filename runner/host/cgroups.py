"""Per-run cgroups on cgroup v1 (with the hybrid v2 leaf for kill) and on cgroup v2-only hosts.

v1 carries the limits (memory, pids, cpu) and the accounting (cpuacct, memory.oom_control);
a leaf in the hybrid `unified` mount gives `cgroup.kill`. On v2-only hosts one leaf does all.
Plain file I/O: the kernel's interface is files, and a library would hide which one we touch.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")


@dataclass(frozen=True)
class CgroupLayout:
    """Which cgroup interface this host offers."""

    version: int  # 1 (v1 limits, maybe a hybrid v2 leaf) or 2 (unified only)
    root: Path
    v1_controllers: tuple[str, ...] = ()
    hybrid_v2: Path | None = None  # the hybrid mount's root, when it offers cgroup.kill

    @classmethod
    def detect(cls, root: Path = CGROUP_ROOT) -> CgroupLayout:
        controllers = root / "cgroup.controllers"
        if controllers.exists():
            return cls(version=2, root=root)
        present = tuple(c for c in V1_CONTROLLERS if (root / c / "cgroup.procs").exists())
        if not {"memory", "pids", "cpuacct"} <= set(present):
            raise RuntimeError(f"no usable cgroups under {root}: need memory, pids and cpuacct (v1) or cgroup v2")
        unified = root / "unified"
        hybrid = unified if (unified / "cgroup.procs").exists() else None
        return cls(version=1, root=root, v1_controllers=present, hybrid_v2=hybrid)

    def describe(self) -> str:
        if self.version == 2:
            return "cgroup v2 (unified)"
        extra = " + v2 leaf for kill" if self.hybrid_v2 else ""
        return f"cgroup v1 ({', '.join(self.v1_controllers)}){extra}"

    def parents(self, parent: str) -> list[Path]:
        """Every directory under which run cgroups of `parent` live."""
        if self.version == 2:
            return [self.root / parent]
        dirs = [self.root / c / parent for c in self.v1_controllers]
        if self.hybrid_v2:
            dirs.append(self.hybrid_v2 / parent)
        return dirs


class RunCgroup:
    """The cgroups of one run: created with limits, joined by the launcher, killed, removed."""

    def __init__(self, layout: CgroupLayout, parent: str, name: str):
        self.layout = layout
        self.name = name
        self.parent = parent
        if layout.version == 2:
            self.v2: Path | None = layout.root / parent / name
            self.v1: dict[str, Path] = {}
        else:
            self.v1 = {c: layout.root / c / parent / name for c in layout.v1_controllers}
            self.v2 = layout.hybrid_v2 / parent / name if layout.hybrid_v2 else None

    @property
    def _v2_leaf(self) -> Path:
        if self.v2 is None:
            raise RuntimeError("this host has no cgroup v2 leaf for the run")
        return self.v2

    @property
    def dirs(self) -> list[Path]:
        return [*self.v1.values(), *([self.v2] if self.v2 else [])]

    @property
    def procs_files(self) -> list[str]:
        """Files the launcher writes its own pid to, before exec, so nothing runs outside."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    # setup

    def create(self, *, memory_bytes: int, pids_max: int, cpus: float, cpu_weight: int = 100) -> None:
        for parent in self.layout.parents(self.parent):
            parent.mkdir(exist_ok=True)
        if self.layout.version == 2:
            self._enable_v2_controllers()
        for path in self.dirs:
            path.mkdir(exist_ok=False)
        self.set_limits(memory_bytes=memory_bytes, pids_max=pids_max, cpus=cpus, cpu_weight=cpu_weight)

    def set_limits(self, *, memory_bytes: int, pids_max: int, cpus: float, cpu_weight: int = 100) -> None:
        """Write the caps (at creation, and again when a ready sandbox is handed its run): a
        memory limit below what the cgroup holds makes the kernel reclaim, then OOM-kill."""
        quota = max(1000, int(cpus * 100_000))
        if self.layout.version == 2:
            leaf = self._v2_leaf
            _write(leaf / "memory.max", memory_bytes)
            _write_if_exists(leaf / "memory.swap.max", 0)
            _write(leaf / "pids.max", pids_max)
            _write(leaf / "cpu.max", f"{quota} 100000")
            _write(leaf / "cpu.weight", cpu_weight)
            return
        memory = self.v1["memory"]
        # memory + swap may never be below memory alone: raising, the first goes first.
        limits = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        current = _read_int(memory / "memory.limit_in_bytes")
        for name in reversed(limits) if current is not None and memory_bytes > current else limits:
            (_write if name == limits[0] else _write_if_exists)(memory / name, memory_bytes)
        _write_if_exists(memory / "memory.swappiness", 0)
        _write(self.v1["pids"] / "pids.max", pids_max)
        if "cpu" in self.v1:
            _write(self.v1["cpu"] / "cpu.cfs_period_us", 100_000)
            _write(self.v1["cpu"] / "cpu.cfs_quota_us", quota)
            _write(self.v1["cpu"] / "cpu.shares", max(2, cpu_weight * 1024 // 100))  # v1's default 1024 is 100

    def set_cpu_weight(self, cpu_weight: int) -> None:
        """The CPU share alone (a ready sandbox being made, which a run now waits for, is raised)."""
        if self.layout.version == 2:
            _write(self._v2_leaf / "cpu.weight", cpu_weight)
        elif "cpu" in self.v1:
            _write(self.v1["cpu"] / "cpu.shares", max(2, cpu_weight * 1024 // 100))

    def _enable_v2_controllers(self) -> None:
        parent = self.layout.root / self.parent
        wanted = {"memory", "pids", "cpu"}
        for directory in (self.layout.root, parent):
            enabled = set((directory / "cgroup.subtree_control").read_text().split())
            missing = wanted - enabled
            if missing:
                _write(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))

    # reading

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.dirs:
            try:
                found.update(int(line) for line in (path / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                continue
        return found

    def cpu_seconds(self) -> float | None:
        if self.v2 is not None and (self.v2 / "cpu.stat").exists():
            stat = _keyed(self.v2 / "cpu.stat")
            if "usage_usec" in stat:
                return stat["usage_usec"] / 1e6
        if "cpuacct" in self.v1:
            value = _read_int(self.v1["cpuacct"] / "cpuacct.usage")
            return None if value is None else value / 1e9
        return None

    def memory_bytes(self) -> int | None:
        if self.layout.version == 2:
            return _read_int(self._v2_leaf / "memory.current")
        return _read_int(self.v1["memory"] / "memory.usage_in_bytes")

    def memory_peak_bytes(self) -> int | None:
        if self.layout.version == 2:
            return _read_int(self._v2_leaf / "memory.peak")  # None on kernels before 5.19: unknown
        return _read_int(self.v1["memory"] / "memory.max_usage_in_bytes")

    def oom_kills(self) -> int:
        if self.layout.version == 2:
            return _keyed(self._v2_leaf / "memory.events").get("oom_kill", 0)
        return _keyed(self.v1["memory"] / "memory.oom_control").get("oom_kill", 0)

    def pids_max_hits(self) -> int:
        directory = self._v2_leaf if self.layout.version == 2 else self.v1["pids"]
        return _keyed(directory / "pids.events").get("max", 0)

    # stopping

    def signal_all(self, signo: int) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signo)
            except ProcessLookupError:
                pass

    def kill(self) -> str:
        """Kill every process in the run's cgroups; return the method used."""
        if self.v2 is not None and (self.v2 / "cgroup.kill").exists():
            _write(self.v2 / "cgroup.kill", 1)
            return "cgroup.kill"
        if "freezer" in self.v1:
            state = self.v1["freezer"] / "freezer.state"
            _write(state, "FROZEN")
            deadline = time.monotonic() + 1.0
            while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
                time.sleep(0.001)
            self.signal_all(signal.SIGKILL)
            _write(state, "THAWED")
            return "freezer"
        self.signal_all(signal.SIGKILL)
        return "sigkill-each"

    def wait_empty(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        # Short sleeps first: the last process is usually one already exiting (bwrap, after the
        # program), gone within a fraction of a millisecond; a fixed 2 ms poll waited the whole 2 ms.
        delay = 0.0001
        while True:
            if not self.pids():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.002)

    def remove(self, timeout_s: float = 2.0) -> list[str]:
        """rmdir every leaf (retrying while dying tasks linger); return the paths that remain."""
        deadline = time.monotonic() + timeout_s
        remaining = [d for d in self.dirs if d.exists()]
        while remaining:
            still = []
            for path in remaining:
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        raise
                    still.append(path)
            remaining = still
            if not remaining or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        return [str(p) for p in remaining]


def favors_dynmods(layout: CgroupLayout) -> bool | None:
    """Whether the host's cgroup2 mount has `favordynmods` (None: no cgroup2 mount). Without it,
    joining a run's cgroups waits for an RCU grace period: milliseconds on every run."""
    v2_root = str(layout.root if layout.version == 2 else layout.hybrid_v2 or "")
    if not v2_root:
        return None
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            rest = fields[fields.index("-") + 1 :]
            if fields[4] == v2_root and rest[0] == "cgroup2":
                return "favordynmods" in rest[2].split(",")
    return None


def run_names(layout: CgroupLayout, parent: str) -> set[str]:
    """Names of the run cgroups that exist under `parent` in any hierarchy."""
    names: set[str] = set()
    for directory in layout.parents(parent):
        if directory.is_dir():
            names.update(p.name for p in directory.iterdir() if p.is_dir())
    return names


def _write(path: Path, value: object) -> None:
    with open(path, "w") as handle:
        handle.write(str(value))


def _write_if_exists(path: Path, value: object) -> None:
    if path.exists():
        _write(path, value)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _keyed(path: Path) -> dict[str, int]:
    """`key value` lines (memory.events, pids.events, cpu.stat, oom_control) as a dict."""
    result: dict[str, int] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return result
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            result[parts[0]] = int(parts[1])
    return result
