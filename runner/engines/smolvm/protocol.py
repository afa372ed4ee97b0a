"""What the smolvm engine and its per-run child say to each other: the config the supervisor
writes for the child, and the control events the child sends back, one JSON object a line.

Standard library only: the child imports it and nothing else of Cordon. The parent trusts the
config it wrote; it trusts nothing on the control pipe, so `decode` keeps only known events and
fields of the declared type (a bool is never taken for a number), and drops everything else.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple


class Mount(NamedTuple):
    """A host directory shared into the guest (a JSON triple on the wire)."""

    source: str
    target: str
    read_only: bool


# The most a ready branch's hand-over message may hold (the run's argv and environment).
HAND_OVER_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class ChildConfig:
    """What the child needs to create, run and delete one machine; no shell strings anywhere."""

    name: str
    state_root: str
    image: str  # the verified rootfs directory, bound read-only
    cpus: int
    memory_mib: int
    storage_gb: int
    overlay_gb: int
    mounts: list[Mount]
    output_dir: str
    argv: list[str]
    env: dict[str, str]
    user: str  # "uid:gid" in the guest
    workdir: str
    exec_timeout_s: float
    boot_timeout_s: float
    control_fd: int  # the write end of the control pipe, inherited
    sdk_path: str | None  # where to import the smol package from (the traversable copy)
    # A warm start: branch this frozen base (holding its lock shared while the run lives) instead of
    # booting; on any failure, boot cold after all. None: boot cold, for the reason in cold_reason.
    base: str | None = None
    base_lock: str | None = None
    cold_reason: str = ""
    # smolvm's TSI network for a run with egress: the VMM runs in the run's network namespace,
    # whose only reachable place is the egress proxy (runner.host.netns). False: no network at all.
    network: bool = False
    # A ready branch (runner.ready): the child's end of its hand-over socket. The child makes the
    # machine with its mounts, says {"ready": true} on it and waits; the run arrives as one
    # message {"argv", "env", "exec_timeout_s"} (which replace the config's), the guest's entropy
    # and clock are refreshed, and the program starts. The socket closed first: the machine goes.
    ready_fd: int | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ChildConfig:
        raw = json.loads(text)
        return cls(**{**raw, "mounts": [Mount(*mount) for mount in raw["mounts"]]})


@dataclass(frozen=True)
class BaseConfig:
    """What the keeper of a base needs: build it once (booted, no mounts, never given user files or
    code), freeze it with a probe branch, record it, then keep it until stopped (SIGTERM deletes it)."""

    name: str
    state_root: str
    image: str  # the verified rootfs, bound read-only for the base's life
    cpus: int
    memory_mib: int
    storage_gb: int
    overlay_gb: int
    boot_timeout_s: float
    sdk_path: str | None
    folder: str  # the base's folder: base.json, lock, served
    cgroup_procs: list[str]  # the keeper joins its cgroup first, so the VMM it starts is charged there
    admission_dir: str  # the host's admission ledger, where the base holds its memory
    admission_memory_mib: int  # how much it holds
    memory_budget_mib: int  # the host's budget (a base is not built past it)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BaseConfig:
        return cls(**json.loads(text))


# --- control events, child -> parent ---------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """Where smolvm put the machine, as far as the child has learnt; any event may carry them."""

    name: str | None = None
    state_root: str | None = None
    vm_dir: str | None = None
    vm_uid: int | None = None  # smolvm's per-VM uid, which the VMM runs as
    vmm_pid: int | None = None

    def updated(self, newer: Facts) -> Facts:
        """These facts with every one that `newer` knows taken from it."""
        return dataclasses.replace(self, **_present(newer))


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str]
    facts: Facts = field(default_factory=Facts)


@dataclass(frozen=True, kw_only=True)
class Starting(Event):
    kind = "starting"


@dataclass(frozen=True, kw_only=True)
class Ready(Event):
    """The guest booted and its agent answers: the program starts now."""

    kind = "ready"
    boot_s: float | None = None
    vm_start: str | None = None  # how the VM came to be: "cold" (booted for this run) or "branch"
    vm_note: str | None = None  # why it booted cold (warm starts off, no base yet, the branch failed)
    branch_s: float | None = None  # a warm start's phases: the branch until its agent answered,
    mount_s: float | None = None  # the run's three mounts added,
    refresh_s: float | None = None  # fresh entropy and the host's clock set in the guest
    cold_s: float | None = None  # the cold boot (after a failed branch, too)
    clock_skew_s: float | None = None  # guest clock minus host clock after the refresh


READY_TIMINGS = ("branch_s", "mount_s", "refresh_s", "cold_s", "clock_skew_s")  # Ready's phase fields


@dataclass(frozen=True, kw_only=True)
class Exit(Event):
    kind = "exit"
    exit_code: int | None = None  # as the agent reports it: 128 + N for a death by signal N


@dataclass(frozen=True, kw_only=True)
class Error(Event):
    """The engine failed (boot or exec); `code` is Cordon's, `engine_code` the SDK's."""

    kind = "error"
    code: str = "engine_error"
    message: str = ""
    phase: str = ""
    retryable: bool = True
    engine_code: str | None = None


@dataclass(frozen=True, kw_only=True)
class Deleted(Event):
    kind = "deleted"


@dataclass(frozen=True, kw_only=True)
class DeleteFailed(Event):
    kind = "delete_failed"
    message: str = ""


EVENTS: dict[str, type[Event]] = {cls.kind: cls for cls in (Starting, Ready, Exit, Error, Deleted, DeleteFailed)}


def encode(event: Event) -> bytes:
    """One control line: the event's name and its known fields, the facts among them."""
    line = {"event": event.kind, **_present(event.facts), **_present(event, skip="facts")}
    return (json.dumps(line, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> Event | None:
    """The event on one control line, with only the fields of their declared types; None for
    anything that is not a known event."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("event"), str) or raw["event"] not in EVENTS:
        return None
    cls = EVENTS[raw["event"]]
    return cls(facts=Facts(**_typed_fields(Facts, raw)), **_typed_fields(cls, raw, skip="facts"))


def _present(obj: Any, skip: str = "") -> dict[str, Any]:
    """A dataclass's fields that are set (not None), but `skip`."""
    values = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != skip)
    return {name: value for name, value in values if value is not None}


def _typed_fields(cls: type, raw: dict[str, Any], skip: str = "") -> dict[str, Any]:
    """The entries of `raw` that are fields of `cls` and of their declared types."""
    hints = _hints(cls)
    kept = {}
    for f in dataclasses.fields(cls):
        value = raw.get(f.name)
        if f.name != skip and value is not None and _is_a(value, hints[f.name]):
            kept[f.name] = float(value) if float in _types(hints[f.name]) else value
    return kept


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _types(hint: Any) -> tuple[type, ...]:
    return tuple(t for t in typing.get_args(hint) or (hint,) if t is not type(None))


def _is_a(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of a field's type: a bool is not a number, an integer is a float."""
    types = _types(hint)
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)
