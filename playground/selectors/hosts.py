"""Worker hosts as routing sees them: the engines served by a host heard from recently and not
being drained, and what each host holds now."""

from __future__ import annotations

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from playground.dbclock import db_after
from playground.models import WORKER_STATES, Run, WorkerHost

# A worker host beats every few seconds (playground/celery.py); one not heard from for this long
# serves nothing.
WORKER_LIVE_S = 60


def live_hosts() -> QuerySet[WorkerHost]:
    """Hosts with a recent heartbeat that take new runs (not draining)."""
    return WorkerHost.objects.filter(heartbeat_at__gte=db_after(-WORKER_LIVE_S), draining=False)


def live_engines() -> set[str]:
    """The engines that some live worker host, not being drained, serves."""
    return {e for engines in live_hosts().values_list("engines", flat=True) for e in engines or []}


def hosts_with_active_runs() -> QuerySet[WorkerHost]:
    """Every host, annotated with `active_runs`: the runs a worker on it holds now."""
    held = Run.objects.filter(worker_host=OuterRef("name"), state__in=WORKER_STATES)
    count = held.order_by().values("worker_host").annotate(n=Count("id")).values("n")
    return WorkerHost.objects.annotate(active_runs=Coalesce(Subquery(count), 0))
