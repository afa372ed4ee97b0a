"""Worker hosts: each registers, and beats, with the engines its checks say it can serve; runs
are routed to the engines some recently heard-from host serves (selectors/hosts.py)."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from playground.models import WorkerHost

log = logging.getLogger(__name__)


def worker_register(*, name: str, engines: list[str], doctor: dict[str, Any]) -> WorkerHost:
    host, _ = WorkerHost.objects.update_or_create(
        name=name, defaults={"engines": engines, "doctor": doctor, "heartbeat_at": timezone.now()}
    )
    return host


def host_sweep() -> list[str]:
    """Reclaim what crashed runs left on this host (cgroups, mounts, directories); a problem is
    logged, not raised, so that the reaper goes on, and is tried again on its next round."""
    from runner.supervisor import Supervisor

    try:
        return Supervisor().sweep()
    except Exception:
        log.warning("sweep failed", exc_info=True)
        return []
