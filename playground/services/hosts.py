"""Worker hosts: each registers, and beats, under its name (CORDON_HOST_NAME) with the engines its
checks say it can serve; runs are routed to the engines some live host that is not draining serves
(selectors/hosts.py). An operator drains a host from the admin: it finishes the runs it holds and
takes no new ones (its worker stops consuming its engine queues; a task it had already reserved
is sent back for another host)."""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.utils import timezone

from playground.dbclock import db_now
from playground.logs import spool_root
from playground.models import WORKER_STATES, Run, WorkerHost
from playground.services.execution import work_root

log = logging.getLogger(__name__)
# A finished run's directories left on its worker's host are swept once this old (not at once:
# the worker removes its own right after the run's end is committed).
LOCAL_DEBRIS_AGE_S = 60.0


def worker_register(*, name: str, engines: list[str], doctor: dict[str, Any], started: bool = False) -> WorkerHost:
    """The host's row, its engines and doctor report current; `started` when its worker just started."""
    defaults: dict[str, Any] = {"engines": engines, "doctor": doctor, "heartbeat_at": db_now()}
    if started:
        defaults["started_at"] = defaults["heartbeat_at"]
    host, _ = WorkerHost.objects.update_or_create(name=name, defaults=defaults)
    host.refresh_from_db(fields=["heartbeat_at", "started_at"])  # the database's times, not the expressions
    return host


def host_beat(*, name: str) -> bool | None:
    """The host is alive: its heartbeat renewed. Returns whether it is draining (None: no row yet,
    e.g. a test's flush removed it; the next registration writes it again)."""
    WorkerHost.objects.filter(name=name).update(heartbeat_at=db_now())
    return WorkerHost.objects.filter(name=name).values_list("draining", flat=True).first()


def host_is_draining(*, name: str) -> bool:
    return WorkerHost.objects.filter(name=name, draining=True).exists()


def hosts_drain(*, names: Iterable[str], draining: bool) -> int:
    """Drain (or resume) the named hosts; returns how many changed."""
    changes: dict[str, Any] = {"draining": draining, "drain_requested_at": timezone.now() if draining else None}
    return WorkerHost.objects.filter(name__in=list(names)).exclude(draining=draining).update(**changes)


def host_sweep(*, min_age_s: float = LOCAL_DEBRIS_AGE_S) -> list[str]:
    """Reclaim what crashed runs left on this host (cgroups, mounts, directories; the worker's own
    copies of their inputs, outputs and logs); a problem is logged, not raised, so that the reaper
    goes on, and is tried again on its next round."""
    from runner import upkeep
    from runner.supervisor import Supervisor

    try:
        return upkeep.sweep(Supervisor.here()) + worker_debris_sweep(min_age_s=min_age_s)
    except Exception:
        log.warning("sweep failed", exc_info=True)
        return []


def worker_debris_sweep(*, min_age_s: float) -> list[str]:
    """The worker's per-run directories on this host (services/execution.py's work directory, the
    log spool: logs.py) whose run is over (or gone) and that were last touched at least
    `min_age_s` ago; 0 at a worker's start, when nothing of this host's can still be running."""
    swept = []
    cutoff = time.time() - min_age_s
    for parent in (work_root(), spool_root()):
        entries = {e.name: e for e in parent.iterdir()} if parent.is_dir() else {}
        ids = [name for name in entries if _is_uuid(name)]
        active = {str(i) for i in Run.objects.filter(id__in=ids, state__in=WORKER_STATES).values_list("id", flat=True)}
        for name, entry in sorted(entries.items()):
            if name in active or not _is_uuid(name) or _touched_since(entry, cutoff):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            swept.append(f"{parent.name} {name}")
    return swept


def _touched_since(entry: Path, cutoff: float) -> bool:
    """Whether `entry` changed after `cutoff`; one its worker removed meanwhile counts as touched."""
    try:
        return entry.stat().st_mtime > cutoff
    except FileNotFoundError:
        return True


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False
