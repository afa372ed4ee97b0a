"""`python -m runner doctor`: what this host can do, each claim backed by a check that ran.

The host's own checks (cgroups, images, egress) are here; each engine checks itself
(Engine.diagnose: its tools, and a canary run where one is due), and the ready pool reports last.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from runner import upkeep
from runner.engines.base import Check, DoctorContext
from runner.env import ConfigError
from runner.host import netns
from runner.host.cgroups import CgroupLayout, favors_dynmods
from runner.images import ImageError, ImageStore, recipe_names
from runner.ready import status_files
from runner.supervisor import Supervisor


def diagnose(
    supervisor: Supervisor | None = None, *, recheck: bool = False, hash_images: bool = True
) -> dict[str, Any]:
    supervisor = supervisor or Supervisor()
    images = _images(supervisor.images, hash_files=hash_images)
    checks = [_cgroups(), _sandbox_paths(supervisor), *images, _egress(supervisor)]
    ctx = DoctorContext(run=supervisor.run, image=supervisor.images.resolve, recheck=recheck)
    engines = {}
    for name, engine in supervisor.registry.engines.items():
        diagnosis = engine.diagnose(ctx)
        checks += diagnosis.checks
        engines[name] = diagnosis.usable
    checks += ready_checks(supervisor)
    auto, conclusion = supervisor.registry.conclusion(engines)
    return {"checks": [asdict(c) for c in checks], "engines": engines, "auto": auto, "conclusion": conclusion}


def ready_checks(supervisor: Supervisor) -> list[Check]:
    """Ready sandboxes (runner.ready): the setting, and each class each worker process keeps, from
    what the live processes published. A class given up after failures in a row fails its check."""
    settings = supervisor.ready_settings
    if not settings.enabled:
        return [Check("ready sandboxes", True, "off (CORDON_READY=false): every run's sandbox is made for it")]
    pools = status_files(supervisor.paths.host_state_dir)
    held = sum(c["memory_bytes"] for pool in pools for c in pool["classes"]) // (1024 * 1024)
    summary = (
        f"on: each worker process keeps up to {settings.classes} classes ready, {settings.room_mib} MiB of room each, "
        f"never the last {settings.free_slots} free slot(s), made anew after {settings.max_age_s:g} s; "
        f"{len(pools)} process(es) with a pool, {held} MiB held by waiting interpreters"
    )
    checks = [Check("ready sandboxes", True, summary)]
    for pool in pools:
        for cls in pool["classes"]:
            detail = (
                (
                    f"process {pool['pid']}: {cls['ready']} ready, {cls['in_use']} in use, {cls['failures']} failures "
                    f"in a row, {cls['memory_bytes'] // (1024 * 1024)} MiB held, {cls.get('reserved_mib', 0)} MiB "
                    f"reserved in admission; made {pool['made']}, claimed "
                    f"{pool['claimed']}, fell back cold {pool['fell_back']}"
                )
                + ("; none made lately: admission had no room for one" if cls.get("no_room") else "")
                + _lately(cls)
            )
            checks.append(Check(f"ready {cls['class']}", not cls["stopped"], cls["stopped"] or detail))
    return checks


def _lately(cls: dict[str, Any]) -> str:
    """What a class's making and runs took lately (a run waits for a making only if that is sooner)."""
    names = (("make_s", "making one"), ("ready_run_s", "a ready run"), ("cold_run_s", "a cold run"))
    took = [f"{what} {cls[key]:g} s" for key, what in names if cls.get(key) is not None]
    return f"; lately: {', '.join(took)}" if took else ""


def _cgroups() -> Check:
    try:
        layout = CgroupLayout.detect()
    except RuntimeError as exc:
        return Check("cgroups", False, str(exc))
    kill = "cgroup.kill" if layout.version == 2 or layout.hybrid_v2 else "freezer (no cgroup.kill)"
    favor = favors_dynmods(layout)
    joins = {
        True: "cgroup2 mounted with favordynmods (cheap cgroup joins)",
        False: "cgroup2 without favordynmods: every run waits an RCU grace period to join its cgroups "
        "(make cgroup-tuning)",
        None: "no cgroup2 mount",
    }[favor]
    return Check("cgroups", True, f"{layout.describe()}; stop method {kill}; {joins}")


def _sandbox_paths(supervisor: Supervisor) -> Check:
    try:
        upkeep.check_sandbox_paths(supervisor)
    except ConfigError as exc:
        return Check("sandbox paths", False, str(exc))
    return Check(
        "sandbox paths", True, f"the sandboxes' uid ({supervisor.settings.uid_base} and up) reaches their views"
    )


def _images(store: ImageStore, *, hash_files: bool = True) -> list[Check]:
    """Each image built here or with a recipe: its files hashed against its digest, or, without
    `hash_files` (--no-image-hashes), only shown built and present by its recorded digest."""
    return [
        _image_verified(store, name) if hash_files else _image_present(store, name)
        for name in sorted(set(store.built()) | set(recipe_names(store.recipes_dir)))
    ]


def _image_verified(store: ImageStore, name: str) -> Check:
    started = time.monotonic()
    report = store.verify(name)
    took = time.monotonic() - started
    if not report.ok:
        return Check(f"image {name}", False, "; ".join(report.problems[:5]))
    return Check(f"image {name}", True, f"{report.digest} verified ({report.files_checked} paths, {took:.1f} s)")


def _image_present(store: ImageStore, name: str) -> Check:
    try:
        ref = store.resolve(name)
    except ImageError as exc:
        return Check(f"image {name}", False, str(exc))
    return Check(f"image {name}", True, f"{ref.digest} present; not hashed again (--no-image-hashes)")


def _egress(supervisor: Supervisor) -> Check:
    """The site's egress ceiling, and whether a run's network namespace (loopback and its proxy's
    listener) can be made here: without one, a run with egress would end as a sandbox error."""
    ceiling = supervisor.egress.ceiling
    allowed = f"ceiling {', '.join(ceiling.to_json())}" if ceiling else "ceiling empty: no run has network"
    try:
        netns.create().close()
    except OSError as exc:
        return Check("egress", not ceiling, f"{allowed}; a run's network namespace cannot be made here: {exc}")
    return Check("egress", True, f"{allowed}; a run with egress gets a network namespace and proxy of its own")


def render(report: dict[str, Any]) -> str:
    """The report as lines: `ok`, `FAIL` (a fault to fix) or `note` (an advisory check's failure
    while an engine serves: what this host cannot do, said once more in the conclusion)."""
    usable = [name for name, ok in report["engines"].items() if ok]

    def mark(check: dict[str, Any]) -> str:
        return "ok  " if check["ok"] else "note" if check.get("advisory") and usable else "FAIL"

    lines = [f"{mark(c)}  {c['name']}: {c['detail']}" for c in report["checks"]]
    lines.append(f"engines usable here: {', '.join(usable) or 'none'}")
    lines.append(f"conclusion: {report['conclusion']}")
    return "\n".join(lines)
