"""LTI in the console: staff register each LMS (Platform) from its tool configuration, and read the
links and scores the launches made. The tool's keys are listed by kid and public key only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from playground.admin.display import RecordAdmin
from playground.lti import keys
from playground.lti.models import ContextLink, LtiUser, Passback, Platform, ResourceLink, ToolKey


@admin.register(Platform)
class PlatformAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An LMS registration. Its fields come from the LMS's side of the registration (Canvas: the
    developer key and its deployment; Moodle: the tool's "View configuration details")."""

    list_display = ("name", "issuer", "client_id", "active", "created_at")
    list_filter = ("active",)
    search_fields = ("name", "issuer", "client_id")
    readonly_fields = ("tool_urls", "created_at")
    fieldsets = (
        (None, {"fields": ("name", "active")}),
        (
            "From the LMS",
            {
                "fields": (
                    "issuer",
                    "client_id",
                    "deployment_ids",
                    "keyset_url",
                    "auth_login_url",
                    "auth_token_url",
                    "auth_audience",
                )
            },
        ),
        ("What to give the LMS", {"fields": ("tool_urls", "created_at")}),
    )

    @admin.display(description="Cordon's URLs")
    def tool_urls(self, platform: Platform) -> str:
        return format_html(
            "OIDC login (initiate login) URL: <code>{}</code><br>Launch (target link, redirect) URL: <code>{}</code>"
            "<br>Public keyset (JWKS) URL: <code>{}</code>",
            reverse("lti:login"), reverse("lti:launch"), reverse("lti:jwks"),
        )  # fmt: skip


@admin.register(ToolKey)
class ToolKeyAdmin(RecordAdmin):
    """The tool's signing keys (the private halves are never shown). "Rotate" makes a new key that
    signs from now on; an old one is retired here once every LMS has fetched the new keyset."""

    list_display = ("kid", "created_at", "retired_at")
    fields = readonly_fields = ("kid", "public_key_pem", "created_at", "retired_at")
    actions = ("rotate", "retire")

    @admin.action(description="Make a new signing key (the selected ones stay published)")
    def rotate(self, request: HttpRequest, queryset: QuerySet[ToolKey]) -> None:
        key = keys.key_create()
        self.message_user(request, f"New signing key {key.kid}; the older keys stay published until retired.")

    @admin.action(description="Retire (stop publishing) the selected keys, except the newest")
    def retire(self, request: HttpRequest, queryset: QuerySet[ToolKey]) -> None:
        from django.utils import timezone

        newest = keys.signing_key()
        count = queryset.exclude(pk=newest.pk).filter(retired_at__isnull=True).update(retired_at=timezone.now())
        self.message_user(request, f"{count} key(s) retired; {newest.kid} signs.")


@admin.register(LtiUser)
class LtiUserAdmin(RecordAdmin):
    list_display = ("user", "platform", "sub", "created_at", "last_launch_at")
    list_select_related = ("user", "platform")
    list_filter = ("platform",)
    search_fields = ("sub", "user__username")


@admin.register(ContextLink)
class ContextLinkAdmin(RecordAdmin):
    list_display = ("title", "platform", "deployment_id", "context_id", "course", "last_launch_at")
    list_select_related = ("platform", "course")
    list_filter = ("platform",)
    search_fields = ("title", "context_id", "course__title")


@admin.register(ResourceLink)
class ResourceLinkAdmin(RecordAdmin):
    list_display = ("title", "platform", "resource_link_id", "assignment", "created_at")
    list_select_related = ("platform", "assignment")
    list_filter = ("platform",)
    search_fields = ("title", "resource_link_id", "assignment__title")


@admin.register(Passback)
class PassbackAdmin(RecordAdmin):
    list_display = ("created_at", "lti_user", "score_given", "score_maximum", "state", "attempts", "last_error")
    list_select_related = ("lti_user__platform", "lti_user__user")
    list_filter = ("state", "created_at")
    search_fields = ("lti_user__sub", "lti_user__user__username", "last_error")
    ordering = ("-created_at",)
