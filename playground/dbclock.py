"""One clock for what several hosts compare: the database's.

A run's lease is written by the worker that holds it and judged by the reaper of every host; a
host's heartbeat is written by it and judged by every web process and host. Each taken from its
own host's clock, one host's clock stepped two minutes forward made every other host's leases
look expired to it (its reaper finished their running runs as lost) and their heartbeats look
stale. Written and compared as the database's time (Now(): STATEMENT_TIMESTAMP on PostgreSQL),
they never mix two clocks. Times only shown or kept (started_at, finished_at) stay the host's.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now


def db_now() -> Now:
    return Now()


def db_after(seconds: float) -> ExpressionWrapper[CombinedExpression]:
    """The database's time `seconds` from now (negative: ago), for an update or a filter."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())
