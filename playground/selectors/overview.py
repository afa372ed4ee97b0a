"""The audit console's overview: runs by outcome over time, failure rates by host and engine, queue
wait and wall time percentiles, top users by CPU, runs per image. Computed in Python over the runs of
a chosen range (the last hour, 24 hours, 7 days, 30 days or one of its own, at most 90 days: a
bounded window), so it reads the same on SQLite and PostgreSQL."""

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
class Series:
    """Runs created per bucket of `bucket_s` seconds: `starts` (each bucket's start, unix seconds)
    and one count list per outcome."""

    starts: list[int]
    bucket_s: int
    by_outcome: dict[str, list[int]]
    totals: dict[str, int]


# The ranges the page offers, and the longest one it draws (a custom range past it is refused:
# the page reads every run of its range).
RANGES = {"1h": timedelta(hours=1), "24h": DAY, "7d": WINDOW, "30d": timedelta(days=30)}
LONGEST = timedelta(days=90)
MAX_ROWS = 250_000  # runs read for one overview: past it, the range starts at the oldest of those read


def bucket_for(span: timedelta) -> timedelta:
    """A bar's width for a range: 5 minutes up to 2 hours, an hour up to 8 days, else a day."""
    if span <= timedelta(hours=2):
        return timedelta(minutes=5)
    return timedelta(hours=1) if span <= timedelta(days=8) else DAY


@dataclass(frozen=True)
class Overview:
    since: datetime
    now: datetime
    runs: int
    cut: bool  # the range had more than MAX_ROWS runs: it starts at the oldest of the newest MAX_ROWS
    series: Series
    by_host: list[Rate]
    by_engine: list[Rate]
    queue_wait: Percentiles
    wall: Percentiles
    top_users: list[tuple[str, float, int]]  # username, CPU seconds, runs
    images: list[tuple[str, str, int]]  # digest, image names, runs

    def chart_data(self) -> dict[str, Any]:
        """What the page's chart draws (static/js/overview.js), as JSON-ready data."""
        return {"starts": self.series.starts, "bucket_s": self.series.bucket_s, "series": self.series.by_outcome}


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


def _bucketed(rows: list[dict[str, Any]], *, since: datetime, now: datetime, bucket: timedelta) -> Series:
    """Each run counted in the bucket it was created in: buckets aligned on the bucket's width (UTC),
    a partial one at each end."""
    width = int(bucket.total_seconds())
    first = int(since.timestamp()) // width * width
    count = (int(now.timestamp()) - first) // width + 1
    outcomes = [*(o.value for o in Outcome), UNFINISHED]
    by_outcome = {outcome: [0] * count for outcome in outcomes}
    for row in rows:
        slot = (int(row["created_at"].timestamp()) - first) // width
        if 0 <= slot < count:
            by_outcome[row["outcome"] or UNFINISHED][slot] += 1
    totals = {outcome: sum(counts) for outcome, counts in by_outcome.items() if sum(counts)}
    return Series(
        starts=[first + i * width for i in range(count)], bucket_s=width,
        by_outcome={outcome: counts for outcome, counts in by_outcome.items() if outcome in totals}, totals=totals,
    )  # fmt: skip


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


def overview(*, now: datetime | None = None, since: datetime | None = None) -> Overview:
    """The runs created from `since` (default: 7 days before) to `now`, at most LONGEST apart."""
    now = now or timezone.now()
    since = since or now - WINDOW
    if not timedelta(0) < now - since <= LONGEST:
        raise ValueError(f"a range is from before its end and at most {LONGEST.days} days long")
    runs = Run.objects.filter(created_at__gte=since, created_at__lt=now)
    # The newest MAX_ROWS of the range at most: a long range on a busy site is read in bounded time.
    rows: list[dict[str, Any]] = list(runs.order_by("-created_at").values(*ROW_FIELDS)[: MAX_ROWS + 1])
    cut = len(rows) > MAX_ROWS
    if cut:
        rows = rows[:MAX_ROWS]
        since = rows[-1]["created_at"]
        runs = runs.filter(created_at__gte=since)
    # Queue wait ends at admission (the host had room); a run recorded before admission events
    # existed, or never admitted, counts from its claim.
    admitted = dict(
        RunEvent.objects.filter(run__in=runs, state=RunState.ADMITTED)
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
        cut=cut,
        series=_bucketed(rows, since=since, now=now, bucket=bucket_for(now - since)),
        by_host=_rates(rows, "worker_host"),
        by_engine=_rates(rows, "engine"),
        queue_wait=_percentiles(waits),
        wall=_percentiles([row["wall_s"] for row in rows if row["wall_s"] is not None]),
        top_users=top_users[:TOP_USERS],
        images=[(d, ", ".join(sorted(names[d])) or "unknown", n) for d, n in digests.most_common()],
    )
