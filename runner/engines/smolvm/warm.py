"""Warm starts for the smolvm engine: building a frozen base per (image, size) in a keeper process,
branching it for a run, and removing and sweeping bases. `WarmStarts` is the engine's share of it
(SmolvmEngine inherits it); `bases` holds what a host knows of its bases (records, locks, ages)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from runner.engines.base import RunContext
from runner.engines.smolvm import checks
from runner.engines.smolvm.bases import BASE_PREFIX, BaseKey, BaseRecord, Bases
from runner.engines.smolvm.protocol import BaseConfig
from runner.engines.smolvm.runtime import OVERLAY_GB, VMM_OVERHEAD_MIB, storage_gb, wheel_dir
from runner.host import hostfs
from runner.host.cgroups import CgroupLayout, RunCgroup, run_names
from runner.images import ImageRef
from runner.spec import MIB, CleanupCheck, Limits, RunnerError

NEW_BASE_GRACE_S = 60.0
# At the bound on bases, a base not branched for this long makes way for a base of another size.
REPLACE_IDLE_S = 60.0


@dataclass(frozen=True)
class WarmSettings:
    """Warm starts (bases): on, off, or `auto` (on where the warm canary passed); bases built
    on a run's first need (`lazy`) or for the default size when the worker starts (`start`)."""

    mode: str = "auto"
    build: str = "lazy"
    max_bases: int = 4
    max_age_s: float = 86400.0
    canary_file: Path | None = None  # the warm canary's record, which `auto` reads
    admission_dir: Path | None = None  # the host's admission ledger, where a base holds its memory
    memory_budget_mib: int = 0


class WarmStarts:
    """The warm-start share of the smolvm engine: what it needs of the engine is declared here."""

    warm: WarmSettings
    bases: Bases
    state_root: Path
    boot_timeout_s: float
    child_module: str
    extra_env: dict[str, str]
    layout: CgroupLayout
    cgroup_parent: str
    _build_lock: threading.Lock

    def runtime(self) -> Path:
        raise NotImplementedError

    def child_env(self, *, egress: bool = False) -> dict[str, str]:
        raise NotImplementedError

    def machine_names(self) -> list[str]:
        raise NotImplementedError

    def delete_machine(self, name: str) -> str:
        raise NotImplementedError

    def warm_enabled(self) -> tuple[bool, str]:
        """Whether runs branch warm bases here, and why (or why not)."""
        mode = self.warm.mode
        if mode == "false":
            return False, "warm starts are off (CORDON_SMOLVM_WARM=false)"
        if mode == "true":
            return True, "warm starts are on (CORDON_SMOLVM_WARM=true)"
        canary = checks.read_json(self.warm.canary_file) if self.warm.canary_file else None
        if canary and canary.get("ok"):
            return True, "warm starts are on: the warm canary passed"
        why = f"the warm canary failed ({canary.get('reason')})" if canary else "no warm canary has passed here"
        return False, f"warm starts are off: {why} (python -m runner doctor)"

    def base_key(self, image: ImageRef, limits: Limits) -> BaseKey:
        return BaseKey(
            image=image.name,
            image_digest=image.digest,
            runtime=self.runtime().parent.name,
            cpus=max(1, round(limits.cpus)),
            memory_mib=limits.memory_mib,
            storage_gb=storage_gb(limits),
            overlay_gb=OVERLAY_GB,
            uid_drop=self.extra_env.get("SMOLVM_VM_UID_DROP", ""),
        )

    def warm_base(self, ctx: RunContext) -> tuple[str | None, str]:
        """The base this run branches, or None and why it boots cold (a lazy build starts here)."""
        on, why = self.warm_enabled()
        if not on:
            return None, why
        key = self.base_key(ctx.image, ctx.limits)
        base, why = self.bases.usable(key)
        if base is None and self.warm.build == "lazy" and self.bases.rebuildable(key.name):
            try:
                started = self.build_base(ctx.image, key)
            except (OSError, RunnerError) as exc:  # a warm start is an optimisation: the run goes on cold
                why += f"; could not start building one: {exc}"
            else:
                why += "; building one now" if started else f"; not built: {self.build_refusal(key)}"
        return base, why

    def build_refusal(self, key: BaseKey) -> str:
        live = self.bases.live()
        if not live:
            return "another build holds it"
        return (
            f"{len(live)} bases already (at most {self.warm.max_bases}), each branched in the last {REPLACE_IDLE_S:g} s"
        )

    def build_base(self, image: ImageRef, key: BaseKey) -> bool:
        """Start a keeper that builds and keeps the base of `key` (returns at once). False when a base
        of this key exists or one more would pass the host's bound of bases."""
        with self._build_lock, open(self._bases_root() / ".build.lock", "w") as build_lock:
            fcntl.flock(build_lock, fcntl.LOCK_EX)  # one builder at a time on this host
            existing = self.bases.read(key.name)
            if existing is not None and existing.keeper_alive():
                return False
            live = self.bases.live()
            if len(live) >= self.warm.max_bases and not self._replace_one(live):
                return False
            folder = self.bases.folder(key.name)
            if folder.exists():  # a dead keeper's base or a crashed build's folder: gone first
                self.remove_base(key.name)
            folder.mkdir(mode=0o755)
            os.chmod(folder, 0o755)  # noqa: S103 - per-VM uids reach the image below
            (folder / "root").mkdir()
            hostfs.bind_readonly(image.rootfs, folder / "root")
            cgroup = self._base_cgroup(key.name)
            _kill(cgroup)  # what a crashed build left under this name
            cgroup.remove()
            cgroup.create(
                memory_bytes=(key.memory_mib + VMM_OVERHEAD_MIB) * MIB, pids_max=4096, cpus=float(key.cpus + 1)
            )
            config = BaseConfig(
                name=key.name,
                state_root=str(self.state_root),
                image=str(folder / "root"),
                cpus=key.cpus,
                memory_mib=key.memory_mib,
                storage_gb=key.storage_gb,
                overlay_gb=key.overlay_gb,
                boot_timeout_s=max(self.boot_timeout_s, 60.0),
                sdk_path=str(self.runtime().parent),
                folder=str(folder),
                cgroup_procs=cgroup.procs_files,
                admission_dir=str(self.warm.admission_dir or self.state_root.parent / "admission"),
                admission_memory_mib=key.memory_mib + VMM_OVERHEAD_MIB,
                memory_budget_mib=self.warm.memory_budget_mib or 1 << 30,
            )
            (folder / "keeper.json").write_text(config.to_json())
            with open(folder / "keeper.log", "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", self.child_module, "--keep", str(folder / "keeper.json")],
                    env=self.child_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, close_fds=True,
                )  # fmt: skip
            started = psutil.Process(proc.pid).create_time()
            self.bases.write(BaseRecord(key.name, key, "building", time.time(), proc.pid, started))
            threading.Thread(target=proc.wait, name=f"keeper-{key.name}", daemon=True).start()
            return True

    def ensure_base(self, image: ImageRef, limits: Limits) -> BaseRecord | None:
        """The base for runs of these limits, built now if there is none (or only a failed or dead
        one), once it is frozen or failed; None if its build did not finish in time."""
        key = self.base_key(image, limits)
        self.build_base(image, key)  # builds nothing while a keeper of this key lives
        return self.wait_for_base(key.name, timeout_s=3 * self.boot_timeout_s + 120)

    def wait_for_base(self, name: str, timeout_s: float) -> BaseRecord | None:
        """The base's record once it is frozen or failed (or its keeper died); None on time-out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            record = self.bases.read(name)
            if record is None or record.state != "building" or not record.keeper_alive():
                return record
            time.sleep(0.2)
        return None

    def remove_base(self, name: str) -> list[CleanupCheck]:
        """Stop a base's keeper and VMM, delete its machines, unmount its image and remove its folder
        and cgroup; the checks say what is left. The caller holds no branch of it."""
        cgroup = self._base_cgroup(name)
        _kill(cgroup)
        for machine in (name + "-probe", name):
            self.delete_machine(machine)
        folder = self.bases.folder(name)
        if hostfs.mounts_under(folder):
            hostfs.unmount(folder / "root")
        left_cgroup = cgroup.remove()
        mounted = hostfs.mounts_under(folder)
        if not mounted:
            shutil.rmtree(folder, ignore_errors=True)
        listed = {name, name + "-probe"} & set(self.machine_names())
        vms = self.state_root / ".cache" / "smolvm" / "vms"
        for machine in (name, name + "-probe"):
            (vms / f".{machine}.fork-operation.lock").unlink(missing_ok=True)
        return [
            CleanupCheck("base machine", not listed, f"still listed: {sorted(listed)}" if listed else "deleted"),
            CleanupCheck("base processes", not cgroup.pids(), "keeper and VMM stopped"),
            CleanupCheck("base cgroup", not left_cgroup, f"left: {left_cgroup}" if left_cgroup else "removed"),
            CleanupCheck("base folder", not folder.exists(), f"mounted: {mounted}" if mounted else "removed"),
        ]

    def _replace_one(self, live: list[BaseRecord]) -> bool:
        """At the bound on bases, the one branched longest ago goes for a new one (the bases are a
        cache of the sizes runs ask for now), if it has been idle REPLACE_IDLE_S; whether one went."""
        idle = [r for r in live if r.state == "frozen" and time.time() - self.bases.last_used(r.name) >= REPLACE_IDLE_S]
        for record in sorted(idle, key=lambda r: self.bases.last_used(r.name)):
            checks = self._remove_unheld(record.name)
            if checks is not None:
                return all(c.ok for c in checks)  # what it left, the next sweep names
        return False

    def give_back_room(self, image: ImageRef, limits: Limits, enough: Callable[[], bool]) -> list[str]:
        """A run waits for room: idle bases go, the longest unused first, until `enough()`. A base is
        a cache, never a reason to keep a run out (with four bases a 4 GiB host had no room left for
        one run). The base the waiting run would branch stays, and a base a build or a branch holds
        (its lock) is not idle."""
        records = self.bases.records()
        if not records:
            return []
        keep = self.base_key(image, limits).name
        idle = sorted(
            (r for r in records if r.name != keep and r.state != "building"),
            key=lambda r: self.bases.last_used(r.name),
        )
        gone = []
        for record in idle:
            if enough():
                break
            checks = self._remove_unheld(record.name)
            if checks is not None:
                gone.append(f"smolvm base {record.name} ({record.key.image} at {record.key.size_class}, idle)"
                            + _left(checks))  # fmt: skip
        return gone

    def _remove_unheld(self, name: str) -> list[CleanupCheck] | None:
        """Remove a base that no build or branch holds (its lock, taken exclusively without waiting):
        the checks of what is left, or None when one holds it."""
        lock = self.bases.lock(name, exclusive=True)
        if lock is None:
            return None
        try:
            return self.remove_base(name)
        finally:
            os.close(lock)

    def sweep_bases(self, *, everything: bool = False) -> list[str]:
        """Remove the bases that should go (or all), each only when no run holds a branch of it."""
        swept = []
        on, _ = self.warm_enabled()
        records = {name: self.bases.read(name) for name in self.bases.names()}
        superseded = self.bases.superseded([r for r in records.values() if r is not None])
        runtime = self.runtime().parent.name if wheel_dir() is not None else ""
        for name, record in records.items():
            why = (
                "asked to"
                if everything
                else superseded.get(name)
                or self.bases.why_remove(record, runtime=runtime, warm=on, max_age_s=self.warm.max_age_s)
            )
            if not why or (record is None and not everything and self.bases.age_s(name) < NEW_BASE_GRACE_S):
                continue  # (a folder without a record yet: a build that has just started)
            checks = self._remove_unheld(name)
            if checks is None:
                continue  # a build or a run's branch holds it: next time
            swept.append(f"smolvm base {name} ({why})" + _left(checks))
        for group in sorted(run_names(self.layout, self._bases_parent())):
            if group not in records:  # a base's cgroup with no folder: what a crash left
                _kill(self._base_cgroup(group))
                self._base_cgroup(group).remove()
                swept.append(f"smolvm base cgroup {group}")
        if (self.state_root / ".local" / "share" / "smolvm").exists():
            machines = self.machine_names()
            folders = set(self.bases.names())  # read after the machines: a base's folder comes first
            for machine in machines:
                if machine.startswith(BASE_PREFIX) and machine.removesuffix("-probe") not in folders:
                    self.delete_machine(machine)
                    swept.append(f"smolvm machine {machine} (no base record)")
        return swept

    def describe_bases(self) -> list[dict[str, Any]]:
        """Every base for doctor: image and digest, size class, state, age, branches served."""
        out: list[dict[str, Any]] = []
        for record in self.bases.records():
            cgroup = self._base_cgroup(record.name)
            out.append({
                "name": record.name, "image": record.key.image, "image_digest": record.key.image_digest,
                "size_class": record.key.size_class, "state": record.state, "keeper_alive": record.keeper_alive(),
                "age_s": round(time.time() - record.created_at, 1), "built_s": record.built_s,
                "served": self.bases.served(record.name), "branch_failures": record.branch_failures,
                "memory_bytes": cgroup.memory_bytes(), "error": record.error,
            })  # fmt: skip
        return out

    def _bases_root(self) -> Path:
        self.bases.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.bases.root, 0o755)  # noqa: S103 - per-VM uids traverse it to a base's image
        return self.bases.root

    def _bases_parent(self) -> str:
        # Beside the runs' parent, never under it: the run sweep reclaims everything there.
        return f"{self.cgroup_parent}-bases"

    def _base_cgroup(self, name: str) -> RunCgroup:
        return RunCgroup(self.layout, self._bases_parent(), name)


def _left(checks: list[CleanupCheck]) -> str:
    """What a removal left, for the line that names it ("" when nothing)."""
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    return f"; LEFT {failed}" if failed else ""


def _kill(cgroup: RunCgroup) -> None:
    """Kill every process in a cgroup and wait for it to empty (a partial hierarchy too)."""
    if not cgroup.pids():
        return
    try:
        cgroup.kill()
    except OSError:  # a hierarchy missing below: signal each process
        for pid in cgroup.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    cgroup.wait_empty(10.0)
