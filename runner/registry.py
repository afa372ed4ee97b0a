"""The one engine registry: the engines there are and what a run may ask for, how each is built,
whether it can run here (and why not), and which one a run gets.

The engines' modules are named here alone (ENGINE_CLASSES), and imported only when first needed:
a command that runs no sandbox (`python -m runner images`) must work on a host lacking an engine's
libraries. Everything else of an engine (its settings, its checks, its canary, what it keeps
between runs) is the engine's own, through the engine interface (runner.engines.base).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from runner.config import SupervisorSettings
from runner.engines.base import Availability, Engine, EngineHost
from runner.spec import RunnerError

# Every engine, strongest isolation first (the order `auto` prefers; the last is the fallback,
# which needs no check), and the class that implements it.
ENGINE_CLASSES = {
    "smolvm": "runner.engines.smolvm.engine:SmolvmEngine",
    "namespace": "runner.engines.namespace:NamespaceEngine",
}
ENGINES = tuple(sorted(ENGINE_CLASSES))
# What a run may ask for: an engine by name, or `auto` (the strongest usable here).
REQUESTABLE = ("auto", *ENGINES)
AUTO_PREFERENCE = tuple(ENGINE_CLASSES)
# The isolation a site's require_vm asks for (Engine.isolation).
VM_ISOLATION = "vm"
# Each engine's isolation (its class's `isolation`, which a test holds to this), known without
# importing the engines: the web asks for an isolation, never names an engine.
ENGINE_ISOLATION = {"smolvm": VM_ISOLATION, "namespace": "namespace"}


def engine_class(name: str) -> type[Engine]:
    if name not in ENGINE_CLASSES:
        raise ValueError(f"no engine is called {name!r}; the engines are {', '.join(ENGINES)}")
    module, _, attribute = ENGINE_CLASSES[name].partition(":")
    cls: type[Engine] = getattr(importlib.import_module(module), attribute)
    return cls


def build(
    name: str,
    settings: SupervisorSettings,
    *,
    environ: Mapping[str, str] = os.environ,
    host_state_dir: Path | None = None,
) -> Engine:
    """The engine called `name`: the settings all engines share, and its own from `environ`."""
    host = EngineHost(cgroup_parent=settings.cgroup_parent, host_state_dir=host_state_dir, environ=environ)
    return engine_class(name).from_host(host)


def requested_for(*, require_vm: bool) -> str:
    """What a run asks for: the engine of the VM isolation when its policy requires a microVM
    (the strongest such engine), otherwise `auto`."""
    if not require_vm:
        return "auto"
    return next(name for name in AUTO_PREFERENCE if ENGINE_ISOLATION[name] == VM_ISOLATION)


def auto_choice(usable: Collection[str]) -> str:
    """The engine `auto` picks among those usable (here, or on some live worker host)."""
    return next((name for name in AUTO_PREFERENCE if name in usable), AUTO_PREFERENCE[-1])


class Registry:
    """The engines of one host: built on first use, checked, and chosen for each run."""

    def __init__(self, settings: SupervisorSettings, host_state_dir: Path, *, engines: dict[str, Engine] | None = None):
        self.settings = settings
        self.host_state_dir = host_state_dir
        self._engines = engines

    @property
    def engines(self) -> dict[str, Engine]:
        """Every engine by name (a test may put its own in this dict)."""
        if self._engines is None:
            self._engines = {name: build(name, self.settings, host_state_dir=self.host_state_dir) for name in ENGINES}
        return self._engines

    # --- what runs here -----------------------------------------------------------

    def available(self, name: str) -> Availability:
        """Whether `name` can run here, from a quick check (no sandbox starts, no VM boots)."""
        if name not in self.engines:
            return Availability(False, f"there is no engine {name!r}; the engines are {', '.join(ENGINES)}")
        return self.engines[name].availability()

    def report(self) -> dict[str, Any]:
        """What a worker host says of its engines in its heartbeat (the console shows it)."""
        report: dict[str, Any] = {}
        for engine in self.engines.values():
            report.update(engine.host_report())
        return {**report, "require_vm": self.settings.require_vm}

    def kept(self) -> list[dict[str, str]]:
        """What every engine keeps between runs on this host (Engine.kept), each with its engine."""
        return [{"engine": name, **item} for name, engine in self.engines.items() for item in engine.kept()]

    def serves(self) -> list[str]:
        """The engines this host can serve runs on; under require_vm, only the microVM one."""
        names = [name for name in ENGINES if self.available(name).ok]
        return [name for name in names if self.is_vm(name)] if self.settings.require_vm else names

    def is_vm(self, name: str) -> bool:
        return self.engines[name].isolation == VM_ISOLATION

    def choose(self, requested: str) -> tuple[Engine, str]:
        """The engine for a run, and a note saying why it was chosen."""
        if requested == "auto":
            strongest = AUTO_PREFERENCE[0]
            checked = {n: self.available(n) for n in AUTO_PREFERENCE[:-1]}  # the fallback needs no check
            said = checked[strongest].said_briefly  # auto's reason is always what is known of the strongest
            name = auto_choice([n for n, availability in checked.items() if availability.ok])
            if name == strongest:
                return self.engines[name], f"auto chose {name}: {said}"
            if self.settings.require_vm and not self.is_vm(name):
                raise RunnerError(
                    "vm_required",
                    f"this site requires the microVM engine (require_vm), and {checked[strongest].why}",
                )
            return self.engines[name], f"auto fell back to {name}: {said}"
        if requested not in self.engines:
            raise RunnerError("engine_unavailable", f"engine {requested!r} is not available on this host")
        if self.settings.require_vm and not self.is_vm(requested):
            raise RunnerError(
                "vm_required", f"this site requires the microVM engine (require_vm); {requested!r} was asked for"
            )
        return self.engines[requested], f"{requested} as asked"

    def conclusion(self, usable: Mapping[str, bool]) -> tuple[str, str]:
        """What `auto` picks given which engines proved usable here, and what that means for runs."""
        auto = auto_choice([name for name, ok in usable.items() if ok])
        isolation = self.engines[auto].isolation
        if self.settings.require_vm and isolation != VM_ISOLATION:
            return auto, "require_vm is set and no microVM can boot here: runs are refused"
        if auto == AUTO_PREFERENCE[0]:
            return auto, f"runs use the {auto} engine (isolation {isolation})"
        strongest = AUTO_PREFERENCE[0]
        availability = self.available(strongest)
        why = availability.said_briefly if not availability.ok else "its doctor checks failed"
        return (
            auto,
            f"runs use the {auto} engine (isolation {isolation}): the {strongest} engine cannot run here: {why}",
        )
