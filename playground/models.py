"""Cordon's records: datasets, runs and their audit trail (events, outputs, cleanup checks),
images, worker hosts and API tokens. Writes go through playground/services/, reads through
playground/selectors/, one module per domain in each.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from runner.spec import Phase


class Dataset(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=128)
    file = models.FileField(upload_to="datasets/%Y/%m/", max_length=300)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    sniffed_type = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="dataset_name_per_owner")]

    def __str__(self) -> str:
        return self.name


class RunState(models.TextChoices):
    """A run's state, in order: the web's own (queued, claimed, finished) around the supervisor's
    phases (runner.spec.Phase), which it announces as they begin and which are recorded as they come."""

    QUEUED = "queued"  # a row, sent to its engine's queue
    CLAIMED = "claimed"  # a worker took it and waits for admission on its host
    ADMITTED = Phase.ADMITTED.value
    STARTING = Phase.STARTING.value
    RUNNING = Phase.RUNNING.value
    EXPORTING = Phase.EXPORTING.value
    FINISHED = "finished"  # the final record is written

    @classmethod
    def of(cls, phase: Phase) -> RunState:
        return cls(phase.value)


# The states a worker holds a run in (renewing its lease), and every state of a run not yet finished.
WORKER_STATES = (RunState.CLAIMED, RunState.ADMITTED, RunState.STARTING, RunState.RUNNING, RunState.EXPORTING)
ACTIVE_STATES = (RunState.QUEUED, *WORKER_STATES)


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    runtime = models.CharField(max_length=16)
    code = models.TextField()
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="runs")
    input_outputs: models.ManyToManyField[RunOutputFile, Any] = models.ManyToManyField(
        "RunOutputFile", blank=True, related_name="used_by"
    )
    limits = models.JSONField(default=dict)
    engine_requested = models.CharField(max_length=16, default="auto")
    queue = models.CharField(max_length=32, default="namespace")

    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED, db_index=True)
    outcome = models.CharField(max_length=24, null=True, blank=True, db_index=True)
    reason = models.CharField(max_length=500, blank=True)
    charged = models.BooleanField(null=True)
    cancel_requested = models.BooleanField(default=False)

    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    wall_s = models.FloatField(null=True, blank=True)
    cpu_s = models.FloatField(null=True, blank=True)
    # The program's own memory at its peak (what the memory limit bounds), and apart from it the
    # bytes its scratch and output files held at their peak (tmpfs pages, charged to the same cgroup).
    peak_memory_bytes = models.BigIntegerField(null=True, blank=True)
    peak_file_bytes = models.BigIntegerField(null=True, blank=True)
    stdout_bytes = models.BigIntegerField(default=0)
    stderr_bytes = models.BigIntegerField(default=0)
    stdout_truncated = models.BooleanField(default=False)
    stderr_truncated = models.BooleanField(default=False)
    # Resource samples over time, compactly: [[t_s, cpu_s, memory_bytes, file_bytes], ...] (the
    # program's memory and its files' bytes apart; rows from before file_bytes have three values)
    samples = models.JSONField(default=list, blank=True)
    # Where the time went, from the supervisor (RunResult.timings), in seconds: start_s (until the
    # sandbox started: admission, image check, staging), boot_s (a microVM's boot; only for an
    # engine with a boot phase), total_s (the whole run, teardown included).
    timings = models.JSONField(default=dict, blank=True)

    image_name = models.CharField(max_length=64, blank=True)
    image_digest = models.CharField(max_length=80, blank=True, db_index=True)
    engine = models.CharField(max_length=16, blank=True, db_index=True)
    engine_version = models.CharField(max_length=64, blank=True)
    engine_note = models.CharField(max_length=500, blank=True)
    isolation = models.CharField(max_length=16, blank=True, db_index=True)
    worker_host = models.CharField(max_length=128, blank=True)
    sandbox_id = models.CharField(max_length=64, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    cleanup_ok = models.BooleanField(null=True, db_index=True)

    retry_count = models.PositiveSmallIntegerField(default=0)
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    logs_purged = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.id}"


class RunEvent(models.Model):
    """One row per state change: the audit trail and the source of truth for progress."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=16)
    at = models.DateTimeField(auto_now_add=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        if self.at is None:
            return self.state
        return f"{self.state} at {self.at:%Y-%m-%d %H:%M:%S}.{self.at.microsecond // 1000:03d}"


class RunOutputFile(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="outputs")
    name = models.CharField(max_length=300)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(upload_to="outputs/%Y/%m/", max_length=300, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="output_name_per_run")]

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class CleanupCheck(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="cleanup_checks")
    name = models.CharField(max_length=64)
    ok = models.BooleanField()
    detail = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name}: {'passed' if self.ok else 'FAILED'}"


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
    name = models.CharField(max_length=128, unique=True)
    engines = models.JSONField(default=list)
    doctor = models.JSONField(default=dict)
    heartbeat_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A bearer token, stored only as its sha256; the token itself is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, blank=True)
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class Notebook(models.Model):
    """A user's named notebook: ordered cells (services/notebooks.py has their shape), saved
    whole by the page with the version it read, so that a stale tab cannot overwrite newer work."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notebooks")
    name = models.CharField(max_length=100)
    cells = models.JSONField(default=list)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name


class StaffAccess(models.Model):
    """A staff member's view of another user's code, logs or outputs: who, what, when. Written by
    services/audit.py wherever staff read such data, listed (read-only) in the audit console."""

    staff = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="staff_accesses"
    )
    staff_username = models.CharField(max_length=150)  # kept if the account goes
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="accessed_by_staff"
    )
    owner_username = models.CharField(max_length=150)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="staff_accesses")
    what = models.CharField(max_length=64)  # e.g. "run page", "audit page", "log stdout", "output"
    detail = models.CharField(max_length=300, blank=True)
    path = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "staff accesses"

    def __str__(self) -> str:
        return f"{self.staff_username} viewed {self.owner_username}'s {self.what}"


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
