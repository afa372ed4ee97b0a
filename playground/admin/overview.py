"""The overview (/admin/overview/): the last 7 days at a glance, a page of the site as a whole."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path

from playground.admin.display import (
    NOT_APPLICABLE,
    human_seconds,
    ms_time,
)
from playground.selectors.overview import Rate, overview
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


def overview_view(request: HttpRequest) -> TemplateResponse:
    """The last 7 days at a glance: charts (static/js/overview.js) with their figures beside them."""
    data = overview()
    context = {
        **admin.site.each_context(request),
        "title": "Overview: the last 7 days",
        "overview": data,
        "chart_data": data.chart_data(),
        "by_host": _rate_rows(data.by_host),
        "by_engine": _rate_rows(data.by_engine),
        "queue_wait": (human_seconds(data.queue_wait.p50_s), human_seconds(data.queue_wait.p95_s)),
        "wall": (human_seconds(data.wall.p50_s), human_seconds(data.wall.p95_s)),
        "top_users": [(user, human_seconds(cpu), runs) for user, cpu, runs in data.top_users],
        "window_end": ms_time(data.now),
        "window_start": ms_time(data.now - timedelta(days=7)),
        "receipt_key": _receipt_key(),
    }
    return TemplateResponse(request, "admin/overview.html", context)


# The overview is a page of the site as a whole, not of one model: added to the default site's
# URLs (the project keeps Django's admin.site rather than a subclass of its own).
_site_urls = admin.site.get_urls


def _urls_with_overview() -> list[URLPattern | URLResolver]:
    return [path("overview/", admin.site.admin_view(overview_view), name="overview"), *_site_urls()]


admin.site.get_urls = _urls_with_overview  # type: ignore[method-assign]
