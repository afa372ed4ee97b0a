"""The other records the console lists: staff reads of user data, purges, run receipts, datasets,
courses, images, worker hosts (drained from here), API tokens, invites and the user accounts."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from playground.admin.display import (
    ReadOnlyInline,
    RecordAdmin,
    human_bytes,
    ms_time,
    pairs_table,
    value_words,
)
from playground.models import (
    ApiToken,
    Course,
    Dataset,
    Invite,
    Membership,
    Purge,
    Receipt,
    Run,
    RuntimeImage,
    StaffAccess,
    WorkerHost,
)
from playground.selectors.accounts import invite_status
from playground.selectors.hosts import WORKER_LIVE_S, hosts_with_active_runs
from playground.selectors.receipts import receipt_check
from playground.services.accounts import tokens_revoke
from playground.services.hosts import hosts_drain
from playground.signed_in import signed_in
from runner import receipt as receipts


@admin.register(StaffAccess)
class StaffAccessAdmin(RecordAdmin):
    """Staff reads of other users' code, logs and outputs: a record nobody edits or deletes here."""

    list_display = ("when", "staff_username", "what", "owner_username", "run", "detail", "path")
    list_filter = (("staff", admin.RelatedOnlyFieldListFilter), "what", "at")
    list_select_related = ("run",)
    search_fields = ("staff_username", "owner_username", "run__id", "detail")
    date_hierarchy = "at"
    ordering = ("-at", "-id")

    @admin.display(description="when", ordering="at")
    def when(self, access: StaffAccess) -> str:
        return ms_time(access.at)


@admin.register(Purge)
class PurgeAdmin(RecordAdmin):
    """Deletions of user data, by retention or on a staff member's request: a record nobody edits."""

    list_display = ("when", "kind", "owner_username", "by", "counts_shown")
    list_filter = ("kind", "at")
    search_fields = ("owner_username", "by__username")
    date_hierarchy = "at"
    ordering = ("-at", "-id")

    @admin.display(description="when", ordering="at")
    def when(self, purge: Purge) -> str:
        return ms_time(purge.at)

    @admin.display(description="deleted")
    def counts_shown(self, purge: Purge) -> str:
        return ", ".join(f"{count} {kind}" for kind, count in purge.counts.items() if count) or "nothing"


@admin.register(Receipt)
class ReceiptAdmin(RecordAdmin):
    """Run receipts, by host and place in its chain (README: Operating Cordon, Run receipts). A
    receipt's page checks it as `manage.py verify_audit` does: its signature by the site's key, its
    link to the receipt before it, and its run's rows now against what was signed."""

    list_display = ("when", "host", "sequence", "run_shown", "outcome", "key_id")
    list_filter = ("host", "issued_at")
    search_fields = ("sha256", "body")  # the body names the run, its image and its hashes
    date_hierarchy = "issued_at"
    ordering = ("-issued_at", "-id")
    fields = readonly_fields = ("host", "sequence", "issued_at", "run_shown", "key_id", "sha256", "prev_hash",
                                "verdict", "facts_shown", "body_shown")  # fmt: skip

    class Media:
        css = {"all": ("css/audit.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Receipt]:
        listed: QuerySet[Receipt] = super().get_queryset(request)
        return listed.annotate(run_kept=Exists(Run.objects.filter(id=OuterRef("run_id"))))

    @admin.display(description="when", ordering="issued_at")
    def when(self, receipt: Receipt) -> str:
        return ms_time(receipt.issued_at)

    @admin.display(description="run")
    def run_shown(self, receipt: Receipt) -> str:
        if not getattr(receipt, "run_kept", True):
            return f"{receipt.run_id} (its row deleted)"
        url = reverse("admin:playground_run_change", args=[receipt.run_id])
        return format_html('<a href="{}">{}</a>', url, receipt.run_id)

    @admin.display(description="outcome")
    def outcome(self, receipt: Receipt) -> str:
        return value_words((_body(receipt).get("run") or {}).get("outcome"))

    @admin.display(description="check")
    def verdict(self, receipt: Receipt) -> str:
        found = receipt_check(receipt)
        if not found:
            return "holds: signed by the site's key, linked to the receipt before it, its run's rows unchanged"
        return format_html("<strong>problems found</strong>: {}", "; ".join(found))

    @admin.display(description="what it states")
    def facts_shown(self, receipt: Receipt) -> str:
        return pairs_table(receipts.facts(_body(receipt)))

    @admin.display(description="signed body")
    def body_shown(self, receipt: Receipt) -> str:
        return format_html('<pre class="audit-pre">{}</pre>', json.dumps(_body(receipt), indent=2, sort_keys=True))


def _body(receipt: Receipt) -> dict[str, Any]:
    try:
        body = json.loads(receipt.body)
    except json.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


@admin.register(Dataset)
class DatasetAdmin(RecordAdmin):
    # No delete one by one: a user's data goes with the audited purge action on runs.
    list_display = ("name", "owner", "size_shown", "sniffed_type", "sha256", "created_at")
    list_select_related = ("owner",)
    list_filter = ("sniffed_type", "created_at")
    search_fields = ("name", "owner__username", "sha256")
    # No file link: datasets are user data, and a download here would be a staff read not recorded.
    readonly_fields = ("id", "owner", "name", "size", "sha256", "sniffed_type", "created_at")

    @admin.display(description="size", ordering="size")
    def size_shown(self, dataset: Dataset) -> str:
        return human_bytes(dataset.size)


class MembershipInline(ReadOnlyInline):
    model = Membership
    fields = readonly_fields = ("user", "role", "joined_at")


@admin.register(Course)
class CourseAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Courses as their instructors set them up (read-only here: courses are run from their pages;
    submissions' code is read there, where each staff read is recorded)."""

    list_display = ("title", "created_by", "created_at", "require_vm", "members")
    list_select_related = ("created_by",)
    search_fields = ("title", "created_by__username")
    inlines = (MembershipInline,)
    readonly_fields = ("id", "title", "created_by", "created_at", "allowed_runtimes", "limits_ceiling",
                       "egress_ceiling", "require_vm", "quota_concurrent_runs", "quota_runs_per_hour")  # fmt: skip
    exclude = ("join_code",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="members")
    def members(self, course: Course) -> int:
        return course.memberships.count()


@admin.register(RuntimeImage)
class RuntimeImageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The runtime images `make images` built and pinned: a record, written by the build alone."""

    list_display = ("name", "digest", "built_at", "active")
    list_filter = ("name", "active")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkerHost)
class WorkerHostAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Worker hosts, live or not, what each holds now; drain one (it finishes its runs and takes no
    new ones: services/hosts.py) or resume it. Rows are written by the hosts, never edited here."""

    list_display = ("name", "engines_shown", "status", "active_runs", "heartbeat_at", "started_at")
    fields = readonly_fields = ("name", "engines_shown", "doctor_shown", "heartbeat_at", "started_at", "draining",
                                "drain_requested_at")  # fmt: skip
    actions = ("drain_hosts", "resume_hosts")

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerHost]:
        return hosts_with_active_runs()

    class Media:
        css = {"all": ("css/audit.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a host writes its own row when its worker starts

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_drain_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("playground.change_workerhost"))

    @admin.display(description="engines")
    def engines_shown(self, host: WorkerHost) -> str:
        return ", ".join(host.engines) or "none"

    @admin.display(description="doctor's checks")
    def doctor_shown(self, host: WorkerHost) -> str:
        """What the host found when its worker started: each check and its answer, the smolvm
        canary boot's record in full (a run's engine note says it in one sentence)."""
        rows = []
        for name, value in (host.doctor or {}).items():
            if isinstance(value, dict) and value:
                rows += [(f"{name.replace('_', ' ')}: {k.replace('_', ' ')}", value_words(v)) for k, v in value.items()]
            else:
                rows.append((name.replace("_", " "), value_words(value)))
        return pairs_table(rows)

    @admin.display(description="status")
    def status(self, host: WorkerHost) -> str:
        live = host.heartbeat_at >= timezone.now() - timedelta(seconds=WORKER_LIVE_S)
        if not live:
            return f"not heard from for {WORKER_LIVE_S} s"
        if host.draining:
            return "draining" if getattr(host, "active_runs", 0) else "drained (holds no runs)"
        return "live"

    @admin.display(description="runs held now", ordering="active_runs")
    def active_runs(self, host: WorkerHost) -> int:
        return int(getattr(host, "active_runs", 0))

    @admin.action(description="Drain: finish their runs, take no new ones", permissions=["drain"])
    def drain_hosts(self, request: HttpRequest, queryset: QuerySet[WorkerHost]) -> None:
        names = list(queryset.values_list("name", flat=True))
        changed = hosts_drain(names=names, draining=True)
        self.message_user(request, f"draining {changed} host(s): {', '.join(names)}")

    @admin.action(description="Resume: take new runs again", permissions=["drain"])
    def resume_hosts(self, request: HttpRequest, queryset: QuerySet[WorkerHost]) -> None:
        names = list(queryset.values_list("name", flat=True))
        changed = hosts_drain(names=names, draining=False)
        self.message_user(request, f"resumed {changed} host(s): {', '.join(names)}")


@admin.register(ApiToken)
class ApiTokenAdmin(RecordAdmin):
    """Tokens are made only where the key can be shown once (the account page, or the
    create_api_token command); here they are listed and revoked. A revoked token stops at once
    and stays listed, with when and by whom; nothing deletes one here."""

    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "status")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user", "revoked_by")
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("prefix", "user", "name", "key_hash", "created_at", "last_used_at", "revoked_at", "revoked_by")
    actions = ("revoke_tokens",)
    ordering = ("-created_at",)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("playground.change_apitoken"))

    @admin.display(description="status", ordering="revoked_at")
    def status(self, token: ApiToken) -> str:
        if token.revoked_at is None:
            return "in use"
        return f"revoked {ms_time(token.revoked_at)} by {token.revoked_by or 'a deleted account'}"

    @admin.action(description="Revoke: they stop at once (the records stay)", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = tokens_revoke(tokens=queryset, by=signed_in(request))
        self.message_user(request, f"revoked {revoked} token(s); clients using them now get 401")


@admin.register(Invite)
class InviteAdmin(RecordAdmin):
    """Sign-up invites: made on the account page, where the link is shown once; listed here with
    their status. An unused one is revoked there."""

    list_display = ("prefix", "note", "created_by", "created_at", "expires_at", "status", "used_by", "used_at")
    list_select_related = ("created_by", "used_by")
    search_fields = ("prefix", "note", "created_by__username", "used_by__username")
    readonly_fields = ("prefix", "note", "created_by", "created_at", "expires_at", "used_by", "used_at")
    exclude = ("key_hash",)

    @admin.display(description="status")
    def status(self, invite: Invite) -> str:
        return invite_status(invite)


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), UserAdmin)
