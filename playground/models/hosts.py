"""The hosts' records: the guest images each host built, the worker hosts and their heartbeats."""

from __future__ import annotations

from django.db import models


class RuntimeImage(models.Model):
    name = models.CharField(max_length=64)
    digest = models.CharField(max_length=80, unique=True)
    manifest = models.JSONField(default=list)
    built_at = models.CharField(max_length=32, blank=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name", "-active"]

    def __str__(self) -> str:
        return f"{self.name} {self.digest[:19]}"


class WorkerHost(models.Model):
    """A worker host (CORDON_HOST_NAME): what it serves, when it was last heard from, and whether
    an operator is draining it (it finishes its runs and takes no new ones)."""

    name = models.CharField(max_length=128, unique=True)
    engines = models.JSONField(default=list)
    doctor = models.JSONField(default=dict)
    heartbeat_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)  # when its worker last started
    draining = models.BooleanField(default=False)
    drain_requested_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
