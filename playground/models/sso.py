"""Single sign-on: an account's link to its OpenID provider's subject."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    """A person at the single sign-on provider (its issuer and their `sub`, which never changes nor
    passes to someone else) and the account made for them at their first sign-in. Accounts are found
    by this, never by a user name or an email another account may already have."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities")
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
