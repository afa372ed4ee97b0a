"""LTI's records: the LMSs registered by staff, the tool's own signing keys, and the links from an
LMS's users, contexts and resource links to Cordon's users, courses and assignments; the scores sent
back (or not yet), the short-lived login state of a launch and the picker tokens used."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from playground.models import Assignment, Course, Submission


class ToolKey(models.Model):
    """The tool's RSA key pair, one for the whole site (every LMS is given the same JWKS URL). The
    newest unretired key signs; older unretired keys stay published so that tokens they signed still
    verify during a rotation. In the database rather than a file: every web process and worker, on
    any host, signs with the same key."""

    kid = models.CharField(max_length=64, unique=True)  # the RFC 7638 thumbprint of the public key
    private_key_pem = models.TextField()
    public_key_pem = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)  # no longer published nor used

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"tool key {self.kid}"


class Platform(models.Model):
    """An LMS registration, as staff enter it from the LMS's own tool configuration."""

    name = models.CharField(max_length=200, help_text="How Cordon names this LMS (e.g. 'University Canvas').")
    issuer = models.CharField(max_length=255, help_text="The LMS's issuer (iss), e.g. https://canvas.instructure.com")
    client_id = models.CharField(max_length=255, help_text="The client id the LMS gave this tool.")
    deployment_ids = models.TextField(help_text="The LMS's deployment ids of this tool, one a line.")
    keyset_url = models.URLField(max_length=500, help_text="The LMS's public keyset (JWKS) URL.")
    auth_login_url = models.URLField(max_length=500, help_text="The LMS's OIDC authorization (login) URL.")
    auth_token_url = models.URLField(max_length=500, help_text="The LMS's OAuth2 access token URL.")
    auth_audience = models.CharField(
        max_length=500, blank=True, help_text="The audience of token requests, if the LMS names one (blank: the "
        "token URL).",
    )  # fmt: skip
    active = models.BooleanField(default=True, help_text="Launches from an inactive LMS are refused.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["issuer", "client_id"], name="lti_one_platform_per_client")]

    def __str__(self) -> str:
        return self.name

    def deployments(self) -> list[str]:
        return [line.strip() for line in self.deployment_ids.splitlines() if line.strip()]


class LtiUser(models.Model):
    """An LMS user (its `sub`) as a Cordon user, made just in time with an unusable password."""

    platform = models.ForeignKey(Platform, on_delete=models.CASCADE, related_name="users")
    sub = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lti_links")
    created_at = models.DateTimeField(auto_now_add=True)
    last_launch_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["platform", "sub"], name="lti_one_user_per_sub")]

    def __str__(self) -> str:
        return f"{self.sub} on {self.platform} as {self.user}"


class ContextLink(models.Model):
    """An LMS course (a context of a deployment) bound to a Cordon course, with the service URLs
    its last launch carried."""

    platform = models.ForeignKey(Platform, on_delete=models.CASCADE, related_name="contexts")
    deployment_id = models.CharField(max_length=255)
    context_id = models.CharField(max_length=255)
    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="lti_contexts")
    title = models.CharField(max_length=255, blank=True)
    nrps_url = models.URLField(max_length=1000, blank=True)  # Names and Role Provisioning
    lineitems_url = models.URLField(max_length=1000, blank=True)  # Assignment and Grade Services
    ags_scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_launch_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_launch_at"]
        constraints = [
            models.UniqueConstraint(fields=["platform", "deployment_id", "context_id"], name="lti_one_link_per_context")
        ]

    def __str__(self) -> str:
        return f"{self.title or self.context_id} on {self.platform}"


class ResourceLink(models.Model):
    """An LMS resource link (a placement in its course) bound to one assignment of that course."""

    platform = models.ForeignKey(Platform, on_delete=models.CASCADE, related_name="resource_links")
    resource_link_id = models.CharField(max_length=255)
    context = models.ForeignKey(ContextLink, on_delete=models.CASCADE, related_name="resource_links")
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="lti_links")
    title = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "resource_link_id"], name="lti_one_link_per_resource_link")
        ]

    def __str__(self) -> str:
        return f"{self.title or self.resource_link_id} -> {self.assignment}"


class LineItem(models.Model):
    """The LMS gradebook column (AGS line item) of a resource link. `url` blank: not known yet (the
    launch carried only the container URL); the first score sent finds or creates it."""

    resource_link = models.OneToOneField(ResourceLink, on_delete=models.CASCADE, related_name="line_item")
    url = models.URLField(max_length=1000, blank=True)
    lineitems_url = models.URLField(max_length=1000, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.url or f"(to be created) for {self.resource_link}"


class PassbackState(models.TextChoices):
    PENDING = "pending"  # to be sent (again, after a failed attempt, until the attempts run out)
    SENT = "sent"
    FAILED = "failed"  # every attempt failed: shown to the instructor, who can send it again
    SUPERSEDED = "superseded"  # a newer score of the same student for the same column was recorded


class Passback(models.Model):
    """One score of one submission for one LMS column: recorded when the score changed, then sent by
    a worker. Never deleted by sending: its state, attempts and last error are the audit trail."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="lti_passbacks")
    line_item = models.ForeignKey(LineItem, on_delete=models.CASCADE, related_name="passbacks")
    lti_user = models.ForeignKey(LtiUser, on_delete=models.CASCADE, related_name="passbacks")
    score_given = models.FloatField()
    score_maximum = models.FloatField()
    state = models.CharField(max_length=16, choices=PassbackState.choices, default=PassbackState.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)  # also the score's AGS timestamp
    last_tried_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "last_tried_at"], name="lti_passback_state")]

    def __str__(self) -> str:
        return f"{self.score_given}/{self.score_maximum} for {self.lti_user.sub} ({self.state})"


class LaunchState(models.Model):
    """pylti1p3's login state (the nonce, the state, the launch) between the OIDC login and the
    launch, keyed by a browser's lti1p3 session cookie; short-lived, swept as new ones are written."""

    key = models.CharField(max_length=255, unique=True)
    value = models.JSONField(null=True)
    expires_at = models.DateTimeField(db_index=True)


class PickTokenUse(models.Model):
    """A Deep Linking picker's token that was used (its single-use id), kept until the token has
    expired anyway: whoever writes the row owns the pick, and a second pick with it is refused."""

    use_id = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField(db_index=True)
