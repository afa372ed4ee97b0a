"""The overview (/admin/overview/): a range of time at a glance (the last hour, 24 hours, 7 days, 30
days or one of the viewer's own), a page of the site as a whole; each bar and each outcome's count
links to the runs behind it (the run list, filtered)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone

from playground.admin.display import (
    NOT_APPLICABLE,
    human_seconds,
    ms_time,
)
from playground.selectors.overview import LONGEST, RANGES, UNFINISHED, Rate, overview
from playground.selectors.receipts import site_public_key
from runner.receipt import ReceiptError


def _percent(part: float | None) -> str:
    return NOT_APPLICABLE if part is None else f"{part * 100:.1f} %"


def _rate_rows(rates: list[Rate]) -> list[dict[str, Any]]:
    return [
        {"key": r.key, "finished": r.finished, "sandbox_errors": r.sandbox_errors,
         "sandbox_error_rate": _percent(r.sandbox_error_rate), "audited": r.audited,
         "cleanup_failures": r.cleanup_failures, "cleanup_failure_rate": _percent(r.cleanup_failure_rate)}
        for r in rates
    ]  # fmt: skip


def _receipt_key() -> dict[str, str]:
    """The key that checks run receipts, or why it cannot be read (the page is shown either way)."""
    try:
        return site_public_key()
    except (OSError, ReceiptError) as exc:
        return {"error": str(exc)}


RANGE_WORDS = {"1h": "the last hour", "24h": "the last 24 hours", "7d": "the last 7 days", "30d": "the last 30 days"}
RANGE_LABELS = {"1h": "1 hour", "24h": "24 hours", "7d": "7 days", "30d": "30 days"}
DEFAULT_RANGE = "7d"
BUCKET_WORDS = {300: "5 minutes", 3600: "hour", 86400: "day"}


def _custom_time(text: str) -> datetime:
    """A custom range's end as the page's form sends it ("2026-12-01" or "2026-12-01T08:30"), UTC."""
    if len(text) > 32:
        raise ValueError("too long")
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def chosen_range(request: HttpRequest, now: datetime) -> tuple[datetime, datetime, str, str]:
    """(since, until, the range's key or "custom", its words) from the page's query; a custom range
    that cannot be read or is past LONGEST gives the default, and says why in its words."""
    start, end = request.GET.get("from", ""), request.GET.get("to", "")
    if start or end:
        try:
            since, until = _custom_time(start), min(_custom_time(end) if end else now, now)
        except ValueError:
            since = until = now
        if timedelta(0) < until - since <= LONGEST:
            return since, until, "custom", f"{ms_time(since)} to {ms_time(until)}"
        refused = f"not a range from before its end, at most {LONGEST.days} days long: {start or '…'} to {end or 'now'}"
        return now - RANGES[DEFAULT_RANGE], now, DEFAULT_RANGE, f"{RANGE_WORDS[DEFAULT_RANGE]} ({refused})"
    key = request.GET.get("range", DEFAULT_RANGE)
    key = key if key in RANGES else DEFAULT_RANGE
    return now - RANGES[key], now, key, RANGE_WORDS[key]


def runs_url(since: datetime, until: datetime, outcome: str | None = None) -> str:
    """The run list (the console's changelist) filtered to the runs created in [since, until) and,
    given, of one outcome ("unfinished": none yet)."""
    query: dict[str, str] = {"created_at__gte": since.isoformat(), "created_at__lt": until.isoformat()}
    if outcome == UNFINISHED:
        query["outcome__isnull"] = "True"
    elif outcome:
        query["outcome__exact"] = outcome
    return f"{reverse('admin:playground_run_changelist')}?{urlencode(query)}"


def overview_view(request: HttpRequest) -> TemplateResponse:
    """The chosen range at a glance: a chart (static/js/overview.js) with its figures beside it."""
    since, until, key, words = chosen_range(request, timezone.now())
    data = overview(now=until, since=since)
    totals = [(outcome, count, runs_url(since, until, outcome)) for outcome, count in data.series.totals.items()]
    base = reverse("admin:overview")
    run_list = reverse("admin:playground_run_changelist")
    context = {
        **admin.site.each_context(request),
        "title": f"Overview: {words}",
        "overview": data,
        "range_key": key,
        "range_words": words,
        "ranges": [(k, RANGE_LABELS[k], f"{base}?range={k}") for k in RANGES],
        "custom_from": since.strftime("%Y-%m-%dT%H:%M"),
        "custom_to": until.strftime("%Y-%m-%dT%H:%M"),
        "totals": totals,
        "bucket_words": BUCKET_WORDS.get(data.series.bucket_s, f"{data.series.bucket_s} s"),
        "all_runs_url": runs_url(since, until),
        "chart_data": {**data.chart_data(), "runs_url": run_list},  # overview.js adds each bar's times
        "by_host": _rate_rows(data.by_host),
        "by_engine": _rate_rows(data.by_engine),
        "queue_wait": (human_seconds(data.queue_wait.p50_s), human_seconds(data.queue_wait.p95_s)),
        "wall": (human_seconds(data.wall.p50_s), human_seconds(data.wall.p95_s)),
        "top_users": [(user, human_seconds(cpu), runs) for user, cpu, runs in data.top_users],
        "window_end": ms_time(data.now),
        "window_start": ms_time(data.since),
        "receipt_key": _receipt_key(),
    }
    return TemplateResponse(request, "admin/overview.html", context)


# The overview is a page of the site as a whole, not of one model: added to the default site's
# URLs (the project keeps Django's admin.site rather than a subclass of its own).
_site_urls = admin.site.get_urls


def _urls_with_overview() -> list[URLPattern | URLResolver]:
    return [path("overview/", admin.site.admin_view(overview_view), name="overview"), *_site_urls()]


admin.site.get_urls = _urls_with_overview  # type: ignore[method-assign]
