"""The run list and a run's audit page: filters (cleanup, network, image), the CSV export of the
filtered list, the actions (cancel, rerun), and the audit page's code, inputs, outputs, network,
logs and timeline; opening it is itself recorded as a staff access."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseBase, StreamingHttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from playground.admin.display import (
    NOT_APPLICABLE,
    ReadOnlyInline,
    RecordAdmin,
    human_bytes,
    human_seconds,
    ms_time,
    pairs_table,
    timing_pairs,
    value_words,
)
from playground.csvcells import csv_cell
from playground.errors import ServiceError
from playground.limits import limit_pairs
from playground.models import (
    ACTIVE_STATES,
    CleanupCheck,
    Receipt,
    Run,
    WorkerHost,
)
from playground.selectors.receipts import receipt_check
from playground.selectors.runs import LIST_DEFERRED, run_egress_view, run_log_read
from playground.services.audit import record_staff_access
from playground.services.retention import purge_user_data
from playground.services.runs import run_cancel, run_rerun
from playground.signed_in import signed_in
from runner.receipt import ReceiptError
from runner.units import size_words

LOG_SHOWN_BYTES = 64 * 1024  # of each stream, on a run's audit page
STAFF_ACCESSES_SHOWN = 50
CSV_BATCH = 500
CSV_COLUMNS = (
    "id", "owner", "runtime", "state", "outcome", "reason", "engine", "isolation", "vm_start", "sandbox_start",
    "worker_host", "image_name", "image_digest", "wall_s", "cpu_s", "peak_memory_bytes", "peak_file_bytes",
    "stdout_bytes", "stderr_bytes", "cleanup_ok", "created_at", "started_at", "finished_at",
    # A run's network: its policy (rules separated by spaces) and its proxy's totals, empty for a
    # run without a record (no policy, or it ended before its proxy served it).
    "egress", "egress_connections", "egress_refused", "egress_bytes_out", "egress_bytes_in", "egress_limit",
)  # fmt: skip
EGRESS_TOTALS = ("connections", "refused", "bytes_out", "bytes_in", "limit")
# What the export reads of a run: its columns, and the record its egress totals come from.
CSV_FIELDS = (*(name for name in CSV_COLUMNS if not name.startswith("egress")), "egress", "egress_record")


class _Echo:
    """A file-like object for csv.writer that hands back each line instead of storing it."""

    def write(self, value: str) -> str:
        return value


class CleanupInline(ReadOnlyInline):
    model = CleanupCheck
    fields = readonly_fields = ("name", "ok", "detail")
    verbose_name_plural = "cleanup checks (what teardown removed and verified)"


class CleanupIncomplete(admin.SimpleListFilter):
    title = "cleanup"
    parameter_name = "cleanup"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("incomplete", "cleanup incomplete"), ("ok", "cleanup ok")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        if self.value() == "incomplete":
            return queryset.filter(cleanup_ok=False)
        if self.value() == "ok":
            return queryset.filter(cleanup_ok=True)
        return queryset


class NetworkFilter(admin.SimpleListFilter):
    """Runs with an egress policy, those whose proxy refused something, or passed a cap."""

    title = "network"
    parameter_name = "network"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("egress", "with an egress policy"), ("refused", "with refused attempts"),
                ("capped", "passed an egress cap"), ("none", "no network")]  # fmt: skip

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        if self.value() == "egress":
            return queryset.exclude(egress=[])
        if self.value() == "refused":
            return queryset.filter(egress_record__refused__gt=0)
        if self.value() == "capped":
            return queryset.filter(egress_record__isnull=False).exclude(egress_record__limit="")
        if self.value() == "none":
            return queryset.filter(egress=[])
        return queryset


class ImageFilter(admin.SimpleListFilter):
    """By image digest, each shown with its image's name."""

    title = "image"
    parameter_name = "image_digest"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # order_by(): Run's default ordering would put created_at in the DISTINCT (one row per run)
        pairs = Run.objects.exclude(image_digest="").order_by().values_list("image_digest", "image_name").distinct()
        return sorted((digest, f"{name or '?'} {digest[:19]}") for digest, name in pairs)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(image_digest=self.value()) if self.value() else queryset


class RunChangeList(ChangeList):
    """The run list, its actions and its export read none of the big columns the list does not
    show (a run's code, samples, network record...): a run's audit page reads them."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Run]:
        return super().get_queryset(request, exclude_parameters).defer(*LIST_DEFERRED)


@admin.register(Run)
class RunAdmin(RecordAdmin):
    class Media:
        css = {"all": ("css/audit.css",)}

    # Fits 1400 px: a short id (the whole one on hover and on the run's page), the engine once.
    list_display = (
        "short_id", "owner", "kind", "runtime", "engine_shown", "state", "outcome", "wall", "cpu", "peak_memory",
        "image_short", "cleaned", "created_short",
    )  # fmt: skip
    list_filter = ("outcome", "engine", "isolation", "runtime", "state", "kind", NetworkFilter, CleanupIncomplete,
                   ImageFilter, "created_at")  # fmt: skip
    list_select_related = ("owner",)
    # A run by its id, owner, image or sandbox; and by its code, reason or error message.
    search_fields = ("id", "owner__username", "image_digest", "sandbox_id", "code", "reason", "error_message")
    date_hierarchy = "created_at"
    inlines = (CleanupInline,)
    actions = ("cancel_runs", "rerun_runs", "purge_owner_data")
    fieldsets = (
        ("Run", {"fields": ("id", "owner", "kind", "course", "runtime", "state", "outcome", "reason", "charged",
                            "cancel_requested", "exit_code", "signal", "error_code", "error_message")}),
        ("Figures", {"fields": ("wall", "cpu", "peak_memory", "peak_files", "stdout", "stderr", "limits_shown",
                                "timings_shown")}),
        ("Network", {"fields": ("egress_policy", "egress_totals")}),
        ("Where it ran", {"fields": ("image", "engine", "isolation", "vm_start", "sandbox_start", "host", "cleanup_ok",
                                     "engine_requested", "engine_version", "engine_note", "queue", "sandbox_id")}),
        # Folded: the timeline below has every state change to the millisecond.
        ("Times", {"classes": ("collapse",), "fields": ("created", "enqueued", "started", "finished", "retry_count",
                                                        "retry_of", "rerun_of", "logs_purged")}),
    )  # fmt: skip
    readonly_fields = tuple(name for _, options in fieldsets for name in options["fields"])  # type: ignore[misc]

    # Run records are written by the workers alone (RecordAdmin): the audit page is a view, with no Save.

    @admin.display(description="id", ordering="id")
    def short_id(self, run: Run) -> str:
        return format_html('<span class="audit-mono" title="{}">{}</span>', run.id, str(run.id)[:8])

    @admin.display(description="image", ordering="image_digest")
    def image_short(self, run: Run) -> str:
        """The image's name and the digest's first hex digits (the whole on hover and on the run's page)."""
        if not run.image_digest:
            return NOT_APPLICABLE
        short = run.image_digest.removeprefix("sha256:")[:8]
        return format_html('<span title="{}">{} {}</span>', run.image_digest, run.image_name or "?", short)

    @admin.display(description="cleanup", boolean=True, ordering="cleanup_ok")
    def cleaned(self, run: Run) -> bool | None:
        return run.cleanup_ok

    @admin.display(description="created", ordering="created_at")
    def created_short(self, run: Run) -> str:
        return format_html('<span class="nowrap" title="{}">{}</span>', ms_time(run.created_at),
                           f"{timezone.localtime(run.created_at):%m-%d %H:%M:%S}")  # fmt: skip

    @admin.display(description="engine", ordering="engine")
    def engine_shown(self, run: Run) -> str:
        return run.engine_shown

    @admin.display(description="image")
    def image(self, run: Run) -> str:
        return f"{run.image_name or '?'} {run.image_digest[:19]}" if run.image_digest else NOT_APPLICABLE

    @admin.display(description="limits")
    def limits_shown(self, run: Run) -> str:
        return pairs_table(limit_pairs(run.decoded_limits))

    @admin.display(description="timings")
    def timings_shown(self, run: Run) -> str:
        return pairs_table(timing_pairs(run.timings or {}))

    @admin.display(description="worker host")
    def host(self, run: Run) -> str:
        """The host, linked to its page: its doctor result says why an engine was or was not
        usable there (a run's engine note says it in one sentence)."""
        found = WorkerHost.objects.filter(name=run.worker_host).only("id").first() if run.worker_host else None
        if found is None:
            return run.worker_host or NOT_APPLICABLE
        url = reverse("admin:playground_workerhost_change", args=[found.pk])
        return format_html('<a href="{}">{}</a> <span class="small">(its doctor result)</span>', url, run.worker_host)

    @admin.display(description="wall", ordering="wall_s")
    def wall(self, run: Run) -> str:
        return human_seconds(run.wall_s)

    @admin.display(description="CPU", ordering="cpu_s")
    def cpu(self, run: Run) -> str:
        return human_seconds(run.cpu_s)

    @admin.display(description="peak memory", ordering="peak_memory_bytes")
    def peak_memory(self, run: Run) -> str:
        return human_bytes(run.peak_memory_bytes)

    @admin.display(description="peak file bytes (/tmp, /output)")
    def peak_files(self, run: Run) -> str:
        return human_bytes(run.peak_file_bytes)

    @admin.display(description="stdout")
    def stdout(self, run: Run) -> str:
        return human_bytes(run.stdout_bytes) + (" (truncated at the cap)" if run.stdout_truncated else "")

    @admin.display(description="stderr")
    def stderr(self, run: Run) -> str:
        return human_bytes(run.stderr_bytes) + (" (truncated at the cap)" if run.stderr_truncated else "")

    @admin.display(description="egress policy")
    def egress_policy(self, run: Run) -> str:
        return ", ".join(run.egress) if run.egress else "none: no network"

    @admin.display(description="egress")
    def egress_totals(self, run: Run) -> str:
        record = run.egress_record
        if record is None:
            return NOT_APPLICABLE
        said = (f"{record['connections']} connected, {record['refused']} refused, "
                f"{size_words(record['bytes_out'])} out, {size_words(record['bytes_in'])} in")  # fmt: skip
        return f"{said}; stopped: passed its cap ({record['limit']})" if record.get("limit") else said

    @admin.display(description="created")
    def created(self, run: Run) -> str:
        return ms_time(run.created_at)

    @admin.display(description="enqueued")
    def enqueued(self, run: Run) -> str:
        return ms_time(run.enqueued_at)

    @admin.display(description="claimed (started)")
    def started(self, run: Run) -> str:
        return ms_time(run.started_at)

    @admin.display(description="finished")
    def finished(self, run: Run) -> str:
        return ms_time(run.finished_at)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_urls(self) -> list[URLPattern]:
        export = path("export.csv", self.admin_site.admin_view(self.export_csv), name="playground_run_export")
        return [export, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        run = self.get_object(request, unquote(object_id))
        if run is not None and self.has_view_permission(request, run):
            record_staff_access(viewer=request.user, owner=run.owner, what="audit page", run=run,
                                path=request.get_full_path())  # fmt: skip
            extra_context = {**(extra_context or {}), **_audit(run)}
        return super().change_view(request, object_id, form_url, extra_context)

    def export_csv(self, request: HttpRequest) -> HttpResponseBase:
        """The run list as filtered and searched on the changelist, as CSV, streamed in batches."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("the run list's filters are not valid")
        keys = list(changelist.queryset.values_list("pk", flat=True))
        writer = csv.writer(_Echo())
        header = writer.writerow(CSV_COLUMNS)

        def batch(start: int) -> list[str]:
            chosen = Run.objects.filter(pk__in=keys[start : start + CSV_BATCH])
            runs = chosen.select_related("owner").only(*CSV_FIELDS).in_bulk()
            return [writer.writerow(_csv_row(runs[key])) for key in keys[start : start + CSV_BATCH] if key in runs]

        def lines() -> Iterator[str]:
            yield header
            for start in range(0, len(keys), CSV_BATCH):
                yield from batch(start)

        async def async_lines() -> AsyncIterator[str]:
            # Under ASGI a sync iterator would be read whole before the first byte goes out.
            yield header
            for start in range(0, len(keys), CSV_BATCH):
                for line in await sync_to_async(batch)(start):
                    yield line

        content = async_lines() if isinstance(request, ASGIRequest) else lines()
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        disposition = f'attachment; filename="runs-{stamp}.csv"'
        return StreamingHttpResponse(content, content_type="text/csv; charset=utf-8",
                                     headers={"Content-Disposition": disposition})  # fmt: skip

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        done = [run for run in queryset if run_cancel(run=run, by=signed_in(request)).cancel_requested]
        self.message_user(request, f"cancel requested for {len(done)} of {queryset.count()} runs", messages.SUCCESS)

    @admin.action(description="Re-run the selected runs (as their owners)")
    def rerun_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        created = []
        for run in queryset.defer(None):  # a rerun takes the run's code, stdin and args
            try:
                created.append(str(run_rerun(run=run, by=signed_in(request)).id))
            except ServiceError as exc:
                self.message_user(request, f"run {run.id}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{len(created)} runs queued: {', '.join(created)}", messages.SUCCESS)

    @admin.action(description="Purge the owners' data (datasets, logs, outputs; metadata stays)")
    def purge_owner_data(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for owner in {run.owner for run in queryset}:
            counts = purge_user_data(user=owner, by=signed_in(request))
            self.message_user(request, f"{owner}: purged {counts}", messages.SUCCESS)


def _csv_row(run: Run) -> list[Any]:
    values = {name: getattr(run, name) for name in CSV_COLUMNS if not name.startswith("egress")}
    values["owner"] = run.owner.get_username()
    values["egress"] = " ".join(run.egress)
    record = run.egress_record or {}
    for total in EGRESS_TOTALS:
        values[f"egress_{total}"] = record.get(total, "")
    return [csv_cell(values[name]) for name in CSV_COLUMNS]


def _audit(run: Run) -> dict[str, Any]:
    """What a run's audit page shows beside its fields: code, inputs, outputs, logs, timeline."""
    outputs = [
        {"output": output, "url": reverse("api:run_output", kwargs={"run_id": run.id, "name": output.name})
         if output.file else None}
        for output in run.outputs.all()
    ]  # fmt: skip
    return {
        "audit_code": run.code,
        "audit_datasets": list(run.datasets.all()),
        "audit_chained": list(run.input_outputs.select_related("run")),
        "audit_outputs": outputs,
        "audit_egress": _egress(run),
        "audit_logs": [_log(run, "stdout"), _log(run, "stderr")],
        "audit_timeline": _timeline(run),
        "audit_boot": human_seconds(run.timings["boot_s"]) if run.timings.get("boot_s") is not None else None,
        "audit_vm_start": _vm_start(run),
        "audit_staff": list(run.staff_accesses.all()[:STAFF_ACCESSES_SHOWN]),
        "audit_receipt": _receipt(run),
    }


def _receipt(run: Run) -> dict[str, Any]:
    """The run's receipt as its console page checks it (signature, chain link, the run's rows now
    against what was signed), or why it has none."""
    receipt = Receipt.objects.filter(run_id=run.id).first()
    if receipt is None:
        if run.state in ACTIVE_STATES:
            return {"receipt": None, "why": "not yet: a run's receipt is issued as it finishes"}
        why = "it finished before receipts were kept, or on a host that could not read the signing key (its log says)"
        return {"receipt": None, "why": why}
    try:
        problems = receipt_check(receipt)
    except (OSError, ReceiptError) as exc:
        problems = [f"not checked: the site's key could not be read ({getattr(exc, 'message', exc)})"]
    url = reverse("admin:playground_receipt_change", args=[receipt.pk])
    return {"receipt": receipt, "url": url, "problems": problems}


def _egress(run: Run) -> dict[str, Any] | None:
    """A run's network as its audit page lists it: each attempt's time to the millisecond."""
    view = run_egress_view(run=run)
    if view is not None and view["record"] is not None:
        for attempt in view["record"]["attempts"]:
            attempt["at"] = ms_time(attempt["at"])
    return view


VM_PHASES = (("branch_s", "branch"), ("mount_s", "mounts"), ("refresh_s", "entropy and clock"), ("cold_s", "cold boot"))


def _vm_start(run: Run) -> str:
    """How a run's microVM came to be, with its phases' times (and why it booted cold, if it did)."""
    how = {"cold": "booted cold for this run", "branch": "a fresh branch of a frozen base"}.get(run.vm_start, "")
    phases = [
        f"{label} {human_seconds(run.timings[key])}" for key, label in VM_PHASES if run.timings.get(key) is not None
    ]
    return f"{how}: {', '.join(phases)}" if how and phases else how


def _log(run: Run, stream: str) -> dict[str, Any]:
    data, _, _ = run_log_read(run=run, stream=stream, offset=0, limit=LOG_SHOWN_BYTES)
    kept = run.stdout_bytes if stream == "stdout" else run.stderr_bytes
    notes = []
    if run.logs_purged:
        notes.append("this run's logs were purged")
    elif kept > len(data):
        notes.append(f"cut: the first {human_bytes(len(data))} of {human_bytes(kept)} shown")
    if run.stdout_truncated if stream == "stdout" else run.stderr_truncated:
        notes.append("the program wrote more than the stream's cap; the rest was not kept")
    return {"stream": stream, "text": data.decode("utf-8", errors="replace"), "notes": notes}


def _timeline(run: Run) -> list[dict[str, Any]]:
    """Each event with its time to the millisecond, the time since the one before (the phase that
    ended) and since the run was created."""
    rows = []
    previous: tuple[str, datetime] = ("created", run.created_at)
    for event in run.events.all():
        rows.append({
            "state": event.state, "at": ms_time(event.at), "phase": f"{previous[0]} → {event.state}",
            "since_previous": human_seconds(max(0.0, (event.at - previous[1]).total_seconds())),
            "since_created": human_seconds(max(0.0, (event.at - run.created_at).total_seconds())),
            "detail": value_words(event.detail) if event.detail else "",
        })  # fmt: skip
        previous = (event.state, event.at)
    return rows
