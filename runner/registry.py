"""The one engine registry: the engines there are and what a run may ask for, how each is built
from the supervisor's settings, whether it can run here (and why not), and which one a run gets.

The engines' modules are imported here alone, and only when first needed: a command that runs
no sandbox (`python -m runner images`) must work on a host lacking an engine's libraries.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.engines.base import Engine
from runner.spec import Outcome, RunnerError, RunResult

if TYPE_CHECKING:
    from runner.supervisor import SupervisorSettings

ENGINES = ("namespace", "smolvm")
# What a run may ask for: an engine by name, or `auto` (smolvm when its canary passed here).
REQUESTABLE = ("auto", *ENGINES)
# What `auto` prefers, strongest isolation first; the last one is the fallback.
AUTO_PREFERENCE = ("smolvm", "namespace")
# Harness-only smolvm switches a supervisor passes on when its environment sets them.
SMOLVM_PASSTHROUGH = frozenset({"SMOLVM_VM_UID_DROP"})
CANARY_FILE = "smolvm-canary.json"
WARM_CANARY_FILE = "smolvm-warm-canary.json"
_CANARY_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, from a quick check, and the reason in plain words: `why`
    in full (the doctor's and an operator's), `brief` in a sentence for each run's note."""

    ok: bool
    why: str
    brief: str = ""

    @property
    def said_briefly(self) -> str:
        return self.brief or self.why


def build(
    name: str,
    settings: SupervisorSettings,
    *,
    environ: Mapping[str, str] = os.environ,
    host_state_dir: Path | None = None,
) -> Engine:
    """The engine called `name`, configured from the supervisor's settings."""
    if name == "namespace":
        from runner.engines.namespace import NamespaceEngine

        return NamespaceEngine(cgroup_parent=settings.cgroup_parent)
    if name == "smolvm":
        from runner.admission import Capacity
        from runner.engines.smolvm import SmolvmEngine, WarmSettings

        warm = WarmSettings(
            mode=settings.smolvm_warm,
            build=settings.smolvm_warm_build,
            max_bases=settings.smolvm_warm_max_bases,
            max_age_s=settings.smolvm_warm_max_age_s,
            canary_file=host_state_dir / WARM_CANARY_FILE if host_state_dir else None,
            admission_dir=host_state_dir / "admission" if host_state_dir else None,
            memory_budget_mib=Capacity.from_env(environ).memory_mib,
        )
        return SmolvmEngine(
            state_root=settings.smolvm_state_dir,
            boot_timeout_s=settings.boot_timeout_s,
            cgroup_parent=settings.cgroup_parent,
            extra_env={k: v for k, v in environ.items() if k in SMOLVM_PASSTHROUGH},
            warm=warm if host_state_dir else WarmSettings(mode="false"),
        )
    raise ValueError(f"no engine is called {name!r}; the engines are {', '.join(ENGINES)}")


def auto_choice(usable: Collection[str]) -> str:
    """The engine `auto` picks among those usable (here, or on some live worker host)."""
    return next((name for name in AUTO_PREFERENCE if name in usable), AUTO_PREFERENCE[-1])


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object kept in a file (a canary's record), or None if there is none that reads as one."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def canary_verdict(canary: Mapping[str, Any] | None) -> Availability:
    """Whether smolvm can run here, by the cached canary boot's record (None: there is none)."""
    if not canary:
        return Availability(False, "no smolvm canary boot has run on this host (python -m runner doctor)")
    if canary.get("ok"):
        return Availability(True, "the cached smolvm canary boot passed")
    return Availability(
        False, f"the smolvm canary boot failed ({canary.get('reason')}, at {canary.get('at')})",
        brief=f"no microVM could boot on this host (its canary boot failed at {canary.get('at')}; the host's "
        "doctor result says why)",
    )  # fmt: skip


def canary_record(result: RunResult, *, seconds: float) -> dict[str, Any]:
    """The record of a canary boot (a smolvm run of a no-op), as the canary file keeps it."""
    ok = result.outcome is Outcome.SUCCEEDED and result.cleanup_ok
    if ok:
        reason = f"booted in {result.timings.get('boot_s', 0):.1f} s and ran python3"
    elif result.error is not None:
        reason = f"{result.error.code}: {result.error.message}"
    else:
        reason = f"{result.outcome.value}: {result.reason}"
    return {
        "ok": ok,
        "reason": reason,
        "seconds": round(seconds, 2),
        "at": datetime.now(UTC).strftime(_CANARY_TIME),
        "engine_version": result.engine_version,
        "cleanup_ok": result.cleanup_ok,
    }


def canary_age_s(canary: Mapping[str, Any]) -> float:
    """How old a canary record is; infinitely old when it says no time that can be read."""
    try:
        at = datetime.strptime(str(canary.get("at")), _CANARY_TIME).replace(tzinfo=UTC)
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - at).total_seconds()


def smolvm_installed() -> Availability:
    """Whether the smolmachines wheel is installed, with its version and its components' hashes."""
    from runner.engines.smolvm import component_hashes, engine_version, wheel_dir

    if wheel_dir() is None:
        return Availability(False, "the smolmachines wheel is not installed")
    hashes = ", ".join(f"{name} {digest[:16]}" for name, digest in component_hashes().items())
    return Availability(True, f"{engine_version()}; sha256: {hashes}")


class Registry:
    """The engines of one host: built on first use, checked, and chosen for each run."""

    def __init__(self, settings: SupervisorSettings, host_state_dir: Path, *, engines: dict[str, Engine] | None = None):
        self.settings = settings
        self.host_state_dir = host_state_dir
        self.canary_path = host_state_dir / CANARY_FILE
        self.warm_canary_path = host_state_dir / WARM_CANARY_FILE
        self._engines = engines

    @property
    def engines(self) -> dict[str, Engine]:
        """Every engine by name (a test may put its own in this dict)."""
        if self._engines is None:
            self._engines = {name: build(name, self.settings, host_state_dir=self.host_state_dir) for name in ENGINES}
        return self._engines

    # --- the smolvm canary --------------------------------------------------------

    def read_canary(self) -> dict[str, Any] | None:
        return read_json(self.canary_path)

    def write_canary(self, record: Mapping[str, Any], *, warm: bool = False) -> None:
        path = self.warm_canary_path if warm else self.canary_path
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(path)

    # --- what runs here -----------------------------------------------------------

    def available(self, name: str) -> Availability:
        """Whether `name` can run here, from a quick check (no sandbox starts, no VM boots)."""
        if name == "namespace":
            from runner.engines.namespace import check_available

            return Availability(*check_available())
        if name == "smolvm":
            return canary_verdict(self.read_canary())
        return Availability(False, f"there is no engine {name!r}; the engines are {', '.join(ENGINES)}")

    def serves(self) -> list[str]:
        """The engines this host can serve runs on; under require_vm, only the microVM one."""
        names = [name for name in ENGINES if self.available(name).ok]
        return [name for name in names if name == "smolvm"] if self.settings.require_vm else names

    def choose(self, requested: str) -> tuple[Engine, str]:
        """The engine for a run, and a note saying why it was chosen."""
        if requested == "auto":
            checked = {n: self.available(n) for n in AUTO_PREFERENCE[:-1]}  # the fallback needs no check
            smolvm = checked["smolvm"]  # auto's reason is always what is known of the microVM
            name = auto_choice([n for n, availability in checked.items() if availability.ok])
            if name == "smolvm":
                return self.engines[name], f"auto chose smolvm: {smolvm.said_briefly}"
            if self.settings.require_vm:
                raise RunnerError(
                    "vm_required", f"this site requires the microVM engine (require_vm), and {smolvm.why}"
                )
            return self.engines[name], f"auto fell back to {name}: {smolvm.said_briefly}"
        if requested not in self.engines:
            raise RunnerError("engine_unavailable", f"engine {requested!r} is not available on this host")
        if requested != "smolvm" and self.settings.require_vm:
            raise RunnerError(
                "vm_required", f"this site requires the microVM engine (require_vm); {requested!r} was asked for"
            )
        return self.engines[requested], f"{requested} as asked"

    def conclusion(self, usable: Mapping[str, bool]) -> tuple[str, str]:
        """What `auto` picks given which engines proved usable here, and what that means for runs."""
        auto = auto_choice([name for name, ok in usable.items() if ok])
        if self.settings.require_vm and auto != "smolvm":
            return auto, "require_vm is set and no microVM can boot here: runs are refused"
        if auto == "smolvm":
            return auto, "runs use the smolvm engine (isolation vm)"
        return auto, (
            "runs use the namespace engine (isolation namespace, shared kernel): this host's KVM "
            "cannot boot a microVM guest"
        )
