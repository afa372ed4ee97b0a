"""How the console shows a record's facts (bytes, seconds, moments, small tables, JSON values in
words), and the read-only bases every record's page shares."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from runner.units import seconds_words

NOT_APPLICABLE = "-"


def human_bytes(count: int | None) -> str:
    """Bytes in the unit that reads best (binary units, as on the site); None is unknown, not 0."""
    if count is None:
        return "unknown"
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.1f} s"


def ms_time(moment: datetime | None) -> str:
    """A moment to the millisecond, in the site's time zone."""
    if moment is None:
        return NOT_APPLICABLE
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d}"


def pairs_table(pairs: list[tuple[str, str]]) -> str:
    """A small two-column table (a record's facts as a person reads them, not its JSON)."""
    if not pairs:
        return NOT_APPLICABLE
    rows = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", pairs)
    return format_html('<table class="audit-pairs">{}</table>', rows)


def value_words(value: Any) -> str:
    """A value from a JSON record in words: a list as its items, a dict as "key: value", nothing as "-"."""
    if value is None or value == "" or value == [] or value == {}:
        return NOT_APPLICABLE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value_words(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')}: {value_words(v)}" for k, v in value.items())
    return str(value)


def timing_pairs(timings: dict[str, Any]) -> list[tuple[str, str]]:
    """A run's timings ({"start_s": 0.2, ...}) as ("start", "200 ms") rows."""
    return [(name.removesuffix("_s").replace("_", " "), seconds_words(float(value)) if isinstance(value, int | float)
             else value_words(value)) for name, value in timings.items()]  # fmt: skip


class RecordAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Records the system writes (runs, staff reads, datasets, tokens, invites): listed and read
    here, never added, edited or deleted by hand (an action may still act on them: revoke, purge)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
