"""Worker hosts as routing sees them: the engines served by a host heard from recently."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from playground.models import WorkerHost

# A worker host beats every minute; one not heard from for this long serves nothing.
WORKER_LIVE_S = 180


def live_engines() -> set[str]:
    """The engines that some worker host with a recent heartbeat serves."""
    recent = timezone.now() - timedelta(seconds=WORKER_LIVE_S)
    return {e for host in WorkerHost.objects.filter(heartbeat_at__gte=recent) for e in host.engines or []}
