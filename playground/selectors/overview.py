"""The audit console's overview: runs per hour by outcome, failure rates by host and engine, queue
wait and wall time percentiles, top users by CPU, runs per image. Computed in Python over the last
7 days of runs (a bounded window), so it reads the same on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from playground.models import Run, RunEvent, RunState, RuntimeImage
from runner.spec import Outcome

WINDOW = timedelta(days=7)
DAY = timedelta(hours=24)
UNFINISHED = "unfinished"  # a run without an outcome yet, charted beside the outcomes
TOP_USERS = 10
ROW_FIELDS = (
    "id", "owner__username", "state", "outcome", "engine", "worker_host", "image_name", "image_digest", "cleanup_ok",
    "wall_s", "cpu_s", "created_at", "started_at",
)  # fmt: skip


@dataclass(frozen=True)
class Rate:
    """One row of a rate table: of `finished` runs on this host or engine, how many ended in a
    sandbox_error, and of `audited` (cleanup recorded), how many failed cleanup."""

    key: str
    finished: int
    sandbox_errors: int
    audited: int
    cleanup_failures: int

    @property
    def sandbox_error_rate(self) -> float | None:
        return self.sandbox_errors / self.finished if self.finished else None

    @property
    def cleanup_failure_rate(self) -> float | None:
        return self.cleanup_failures / self.audited if self.audited else None


@dataclass(frozen=True)
class Percentiles:
    count: int
    p50_s: float | None
    p95_s: float | None


@dataclass(frozen=True)
class HourlySeries:
    """Runs created per hour: `hours` (each hour's start, unix seconds) and one count list per outcome."""

    hours: list[int]
    by_outcome: dict[str, list[int]]
    totals: dict[str, int]


@dataclass(frozen=True)
class Overview:
    since: datetime
    now: datetime
    runs: int
    last_24h: HourlySeries
    last_7d: HourlySeries
    by_host: list[Rate]
    by_engine: list[Rate]
    queue_wait: Percentiles
    wall: Percentiles
    top_users: list[tuple[str, float, int]]  # username, CPU seconds, runs
    images: list[tuple[str, str, int]]  # digest, image names, runs

    def chart_data(self) -> dict[str, Any]:
        """What the page's charts draw (static/js/overview.js), as JSON-ready data."""
        return {
            "last_24h": {"hours": self.last_24h.hours, "series": self.last_24h.by_outcome},
            "last_7d": {"hours": self.last_7d.hours, "series": self.last_7d.by_outcome},
        }


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (the smallest value with at least p% of values at or below it);
    None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def _percentiles(values: list[float]) -> Percentiles:
    return Percentiles(len(values), percentile(values, 50), percentile(values, 95))


def _hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _hourly(rows: list[dict[str, Any]], *, now: datetime, span: timedelta) -> HourlySeries:
    first = _hour_start(now - span)  # a partial hour at each end
    count = int(span / timedelta(hours=1)) + 1
    hours = [first + timedelta(hours=i) for i in range(count)]
    index = {hour: i for i, hour in enumerate(hours)}
    outcomes = [*(o.value for o in Outcome), UNFINISHED]
    by_outcome = {outcome: [0] * count for outcome in outcomes}
    for row in rows:
        slot = index.get(_hour_start(row["created_at"]))
        if slot is not None:
            by_outcome[row["outcome"] or UNFINISHED][slot] += 1
    totals = {outcome: sum(counts) for outcome, counts in by_outcome.items() if sum(counts)}
    return HourlySeries(
        hours=[int(hour.timestamp()) for hour in hours],
        by_outcome={outcome: counts for outcome, counts in by_outcome.items() if outcome in totals},
        totals=totals,
    )


def _rates(rows: list[dict[str, Any]], key: str) -> list[Rate]:
    finished: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    audited: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for row in rows:
        if row["state"] != RunState.FINISHED:
            continue
        name = row[key] or "(none)"
        finished[name] += 1
        errors[name] += row["outcome"] == Outcome.SANDBOX_ERROR
        if row["cleanup_ok"] is not None:
            audited[name] += 1
            failures[name] += row["cleanup_ok"] is False
    return [
        Rate(name, finished[name], errors[name], audited[name], failures[name])
        for name in sorted(finished, key=lambda n: (-finished[n], n))
    ]


def overview(*, now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    since = now - WINDOW
    rows: list[dict[str, Any]] = list(Run.objects.filter(created_at__gte=since).values(*ROW_FIELDS))
    # Queue wait ends at admission (the host had room); a run recorded before admission events
    # existed, or never admitted, counts from its claim.
    admitted = dict(
        RunEvent.objects.filter(run__created_at__gte=since, state=RunState.ADMITTED)
        .order_by("run_id", "-at")  # the first admission wins: later pairs overwrite earlier ones
        .values_list("run_id", "at")
    )
    waits = []
    for row in rows:
        end = admitted.get(row["id"]) or row["started_at"]
        if end is not None:
            waits.append(max(0.0, (end - row["created_at"]).total_seconds()))

    cpu: defaultdict[str, float] = defaultdict(float)
    user_runs: Counter[str] = Counter()
    for row in rows:
        user_runs[row["owner__username"]] += 1
        cpu[row["owner__username"]] += row["cpu_s"] or 0.0
    top_users = sorted(((u, cpu[u], user_runs[u]) for u in user_runs if cpu[u] > 0), key=lambda t: (-t[1], t[0]))

    digests: Counter[str] = Counter(row["image_digest"] for row in rows if row["image_digest"])
    names: defaultdict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["image_digest"] and row["image_name"]:
            names[row["image_digest"]].add(row["image_name"])
    for digest, name in RuntimeImage.objects.filter(digest__in=list(digests)).values_list("digest", "name"):
        names[digest].add(name)

    return Overview(
        since=since,
        now=now,
        runs=len(rows),
        last_24h=_hourly([r for r in rows if r["created_at"] >= now - DAY], now=now, span=DAY),
        last_7d=_hourly(rows, now=now, span=WINDOW),
        by_host=_rates(rows, "worker_host"),
        by_engine=_rates(rows, "engine"),
        queue_wait=_percentiles(waits),
        wall=_percentiles([row["wall_s"] for row in rows if row["wall_s"] is not None]),
        top_users=top_users[:TOP_USERS],
        images=[(d, ", ".join(sorted(names[d])) or "unknown", n) for d, n in digests.most_common()],
    )
