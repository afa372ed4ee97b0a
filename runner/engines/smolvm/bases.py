"""Warm starts for the smolvm engine: bases, and what a host knows of them.

A base is a microVM booted once from a verified image with no mounts, brought to "agent ready,
nothing staged", and frozen by a probe branch: it never runs user code and never receives user
files. A run branches it (copy-on-write RAM and disk), adds its own mounts, gets fresh entropy and
the host's clock, runs, and its branch is deleted; a branch is never reused.

One base per (image digest, smolvm runtime, vCPUs, memory, disk): a branch inherits all of these
from its base, so a run gets a base of exactly its own size or boots cold. Each base is:

- a smolvm machine `cordonbase-<key>` (never `cordon-`: the run sweep deletes those), created
  branchable, persistent and detached;
- a keeper process (runner.engines.smolvm.child --keep) in the base's own cgroup
  `<parent>-bases/<name>`, outside the runs' parent: it starts the VMM there (the host, not a
  run, is charged for the base) and holds the base's memory in the admission ledger, an entry
  owned by its pid. SIGTERM makes it delete the machine; if it dies, the base is swept;
- a folder `<bases>/<name>/`: `base.json` (the record), `lock` (the keeper holds it exclusively
  while it builds, every branching run shared while its branch lives; a sweep deletes a base
  only when it can take it exclusively), `served` (one byte per branch), `root` (the image,
  bound read-only for the base's life), `keeper.log`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

BASE_PREFIX = "cordonbase-"
PROBE_SUFFIX = "-probe"
FORMAT = 1  # in every key: a change of what a base is renews them all
STATES = ("building", "frozen", "failed")
WARM_MODES = ("auto", "true", "false")
BUILD_MODES = ("lazy", "start")
MAX_BRANCH_FAILURES = 3  # consecutive: the base is retired and a new one built
# A failed base is built again by a run that needs it this long after the failure (a build can fail
# for a passing reason: no room in the budget then, or under emulated KVM a boot that stopped).
FAILED_BASE_RETRY_S = 60.0


@dataclass(frozen=True)
class BaseKey:
    """Everything a branch inherits from its base; a run with other values boots cold."""

    image: str  # the image's name (python, node)
    image_digest: str
    runtime: str  # the smolvm runtime copy's folder: engine version and component hashes
    cpus: int
    memory_mib: int
    storage_gb: int
    overlay_gb: int
    uid_drop: str  # SMOLVM_VM_UID_DROP as the VMMs get it ("" for smolvm's default)

    @property
    def name(self) -> str:
        text = json.dumps({**dataclasses.asdict(self), "format": FORMAT}, sort_keys=True)
        return BASE_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def size_class(self) -> str:
        return f"{self.cpus} vCPU, {self.memory_mib} MiB, {self.storage_gb} GiB disk"

    def same_class(self, other: BaseKey) -> bool:
        """Whether `other` serves the same runs with a newer image or runtime (it supersedes this)."""
        return (self.image, self.cpus, self.memory_mib, self.storage_gb, self.overlay_gb) == (
            other.image, other.cpus, other.memory_mib, other.storage_gb, other.overlay_gb,
        )  # fmt: skip


@dataclass(frozen=True)
class BaseRecord:
    """base.json: what a base is and how it stands."""

    name: str
    key: BaseKey
    state: str  # building | frozen | failed
    created_at: float  # unix time the build started
    keeper_pid: int
    keeper_started: float  # the keeper's start time, so a reused pid is not taken for it
    built_s: float | None = None  # from the build's start until frozen
    error: str = ""  # why it failed
    branch_failures: int = 0  # consecutive failed branches (runs write them; a success resets)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BaseRecord:
        raw = json.loads(text)
        return cls(**{**raw, "key": BaseKey(**raw["key"])})

    def keeper_alive(self) -> bool:
        try:
            return abs(psutil.Process(self.keeper_pid).create_time() - self.keeper_started) < 0.01
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False


class Bases:
    """The bases of one state root: their folders, records, locks and counters."""

    def __init__(self, root: Path):
        self.root = root

    def folder(self, name: str) -> Path:
        return self.root / name

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith(BASE_PREFIX))

    def age_s(self, name: str) -> float:
        """Seconds since the base's folder was made (infinite when it is gone)."""
        try:
            return time.time() - self.folder(name).stat().st_ctime
        except FileNotFoundError:
            return float("inf")

    def read(self, name: str) -> BaseRecord | None:
        try:
            return BaseRecord.from_json((self.folder(name) / "base.json").read_text())
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            return None

    def write(self, record: BaseRecord) -> None:
        path = self.folder(record.name) / "base.json"
        tmp = path.with_name(f"base.json.{os.getpid()}")
        tmp.write_text(record.to_json())
        tmp.replace(path)

    def records(self) -> list[BaseRecord]:
        return [record for name in self.names() if (record := self.read(name)) is not None]

    def live(self) -> list[BaseRecord]:
        """The bases that are or will be there: their keeper alive, not failed (the bound counts them)."""
        return [r for r in self.records() if r.keeper_alive() and r.state != "failed"]

    def served(self, name: str) -> int:
        try:
            return (self.folder(name) / "served").stat().st_size
        except FileNotFoundError:
            return 0

    def last_used(self, name: str) -> float:
        """Unix time of the base's last branch served, else of its build."""
        for path in (self.folder(name) / "served", self.folder(name) / "base.json"):
            try:
                return path.stat().st_mtime
            except FileNotFoundError:
                continue
        return 0.0

    def rebuildable(self, name: str) -> bool:
        """Whether a run that needs this base may start building it: there is none, or it failed (its
        keeper gone) at least FAILED_BASE_RETRY_S ago."""
        record = self.read(name)
        if record is None:
            return True
        if record.state != "failed" or record.keeper_alive():
            return False
        try:
            failed_at = (self.folder(name) / "base.json").stat().st_mtime
        except FileNotFoundError:
            return True
        return time.time() - failed_at >= FAILED_BASE_RETRY_S

    def count_branch(self, name: str, *, ok: bool) -> None:
        """One branch served (appended: no read-modify-write), or one more failure in a row."""
        if ok:
            with open(self.folder(name) / "served", "ab") as handle:
                handle.write(b".")
        record = self.read(name)
        if record is not None and (not ok or record.branch_failures):
            failures = 0 if ok else record.branch_failures + 1
            self.write(dataclasses.replace(record, branch_failures=failures))

    def usable(self, key: BaseKey) -> tuple[str | None, str]:
        """The base a run of this key branches, or None and why it boots cold."""
        record = self.read(key.name)
        if record is None:
            return None, f"no warm base for {key.image} at {key.size_class} yet"
        if record.state == "building":
            return None, f"the warm base for {key.image} at {key.size_class} is still being built"
        if record.state == "failed":
            return None, f"the warm base for {key.image} at {key.size_class} failed: {record.error[:300]}"
        if not record.keeper_alive():
            return None, "the warm base's keeper is gone"
        if record.branch_failures >= MAX_BRANCH_FAILURES:
            return None, f"the warm base failed {record.branch_failures} branches in a row"
        return record.name, ""

    def lock(self, name: str, *, exclusive: bool) -> int | None:
        """The base's lock taken without waiting (an open descriptor holding it), or None."""
        try:
            fd = os.open(self.folder(name) / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def why_remove(self, record: BaseRecord | None, *, runtime: str, warm: bool, max_age_s: float) -> str:
        """Why a base should go ("" to keep it). Superseded bases are found by `superseded`."""
        if not warm:
            return "warm starts are off"
        if record is None:
            return "no record"
        if record.state == "failed":
            return f"failed: {record.error[:200]}"
        if not record.keeper_alive():
            return f"its keeper is gone ({record.state})"
        if record.state == "frozen" and record.key.runtime != runtime:
            return "built with another smolvm runtime"
        if record.branch_failures >= MAX_BRANCH_FAILURES:
            return f"{record.branch_failures} failed branches in a row"
        if record.state == "frozen" and time.time() - record.created_at > max_age_s:
            return f"older than {max_age_s:g} s"
        return ""

    def superseded(self, records: list[BaseRecord]) -> dict[str, str]:
        """Frozen bases of which a newer frozen base of the same class exists (a new image digest)."""
        frozen = [r for r in records if r.state == "frozen" and r.keeper_alive()]
        out = {}
        for old in frozen:
            newer = [r for r in frozen if r.created_at > old.created_at and old.key.same_class(r.key)]
            if newer:
                out[old.name] = f"superseded by {newer[0].name} (image {newer[0].key.image_digest[:19]})"
        return out
