"""The Django admin is Cordon's audit console: read-only run records with their events,
cleanup checks and outputs; filters for outcome, engine, isolation, runtime, image digest
and incomplete cleanup; actions that say what they did."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from playground.models import (
    ApiToken,
    CleanupCheck,
    Dataset,
    Run,
    RunEvent,
    RunOutputFile,
    RuntimeImage,
    WorkerHost,
)
from playground.services.errors import ServiceError
from playground.services.retention import purge_user_data
from playground.services.runs import run_cancel, run_rerun

admin.site.site_header = "Cordon audit console"
admin.site.site_title = "Cordon"
admin.site.index_title = "Runs, datasets and hosts"


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class EventInline(ReadOnlyInline):
    model = RunEvent
    fields = readonly_fields = ("state", "at", "detail")


class CleanupInline(ReadOnlyInline):
    model = CleanupCheck
    fields = readonly_fields = ("name", "ok", "detail")


class OutputInline(ReadOnlyInline):
    model = RunOutputFile
    fields = readonly_fields = ("name", "size", "sha256")


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


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id", "owner", "runtime", "engine", "isolation", "state", "outcome", "wall_s", "cpu_s",
        "peak_memory_bytes", "short_digest", "cleanup_ok", "created_at",
    )  # fmt: skip
    list_filter = (
        "outcome", "engine", "isolation", "runtime", "state", CleanupIncomplete, "image_digest", "created_at",
    )  # fmt: skip
    list_select_related = ("owner",)
    search_fields = ("id", "owner__username", "image_digest", "sandbox_id")
    date_hierarchy = "created_at"
    inlines = (EventInline, CleanupInline, OutputInline)
    actions = ("cancel_runs", "rerun_runs", "purge_owner_data")
    exclude = ("datasets", "input_outputs", "code")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Run._meta.fields if f.name not in ("code",)]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="image")
    def short_digest(self, run: Run) -> str:
        return run.image_digest[:19]

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        done = [run for run in queryset if run_cancel(run=run, by=request.user).cancel_requested]  # type: ignore[arg-type]
        self.message_user(request, f"cancel requested for {len(done)} of {queryset.count()} runs", messages.SUCCESS)

    @admin.action(description="Re-run the selected runs (as their owners)")
    def rerun_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        created = []
        for run in queryset:
            try:
                created.append(str(run_rerun(run=run, by=request.user).id))  # type: ignore[arg-type]
            except ServiceError as exc:
                self.message_user(request, f"run {run.id}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{len(created)} runs queued: {', '.join(created)}", messages.SUCCESS)

    @admin.action(description="Purge the owners' data (datasets, logs, outputs; metadata stays)")
    def purge_owner_data(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for owner in {run.owner for run in queryset}:
            counts = purge_user_data(user=owner)
            self.message_user(request, f"{owner}: purged {counts}", messages.SUCCESS)


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "owner", "size", "sniffed_type", "sha256", "created_at")
    list_select_related = ("owner",)
    list_filter = ("sniffed_type", "created_at")
    search_fields = ("name", "owner__username", "sha256")
    readonly_fields = ("id", "owner", "name", "file", "size", "sha256", "sniffed_type", "created_at")


@admin.register(RuntimeImage)
class RuntimeImageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "digest", "built_at", "active")
    list_filter = ("name", "active")


@admin.register(WorkerHost)
class WorkerHostAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "engines", "heartbeat_at")
    readonly_fields = ("name", "engines", "doctor", "heartbeat_at")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "user", "name", "created_at", "last_used_at")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), UserAdmin)
