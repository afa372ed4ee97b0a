"""Accounts: API tokens, invites, and the record of a user's data purged."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A bearer token, stored only as its sha256; the token itself is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, blank=True)
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # A revoked token stops at once and its row stays: the record of who revoked it, and when.
    revoked_at = models.DateTimeField(null=True, blank=True, db_index=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="tokens_revoked"
    )

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class Purge(models.Model):
    """A deletion of user data by retention (kind "expired": what was older than its kind's days)
    or on request (kind "user": one user's data, by a staff member): what, how many, who, when.
    An audit row itself: kept for CORDON_RETENTION_AUDIT_DAYS like staff accesses."""

    kind = models.CharField(max_length=16)
    owner_username = models.CharField(max_length=150, blank=True)  # a "user" purge's
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    counts = models.JSONField(default=dict)  # {"logs": 3, "outputs": 5, ...}
    older_than = models.JSONField(default=dict, blank=True)  # an "expired" purge's cutoff per kind
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"purge ({self.kind}) at {self.at:%Y-%m-%d %H:%M}"


class Invite(models.Model):
    """A single-use, expiring sign-up link made by staff; stored only as its sha256, shown once."""

    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(max_length=200, blank=True)  # whom it is for
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="invites_created"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="invites_used"
    )
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invite {self.prefix}…"
