"""Runs and their audit trail: the run, its states and events, its outputs, a notebook cell's
record, the cleanup checks, and every time staff read another person's run."""

from __future__ import annotations

import uuid
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from playground.models.datasets import Dataset
from runner.spec import Limits, Outcome, Phase


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


class RunKind(models.TextChoices):
    """Who a run is for. A user's own runs (`run`: the playground, a notebook, an assignment's Run
    button) are theirs to read; a grading run (`test`: the student's code under one test; `check`:
    the instructor's check program over its results) is owned by the student for accounting but
    readable only by the course's staff, so no hidden test reaches its student through a run."""

    RUN = "run"
    TEST = "test"
    CHECK = "check"


ISOLATION_WORDS = {"vm": "microVM"}


class RunQuerySet(models.QuerySet["Run"]):
    def own(self, user: Any) -> RunQuerySet:
        """The runs `user` may read as their owner: their own, never a grading run."""
        return self.filter(owner=user, kind=RunKind.RUN)


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=8, choices=RunKind.choices, default=RunKind.RUN, db_index=True)
    # The course a run belongs to (an assignment's Run button, a grading run): its staff may read it.
    course = models.ForeignKey("Course", null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    runtime = models.CharField(max_length=16)
    # The guest image it asked for (playground.environments); blank: its runtime's own image.
    environment = models.CharField(max_length=64, blank=True)
    code = models.TextField()
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="runs")
    input_outputs: models.ManyToManyField[RunOutputFile, Any] = models.ManyToManyField(
        "RunOutputFile", blank=True, related_name="used_by"
    )
    limits = models.JSONField(default=dict)
    # What the program gets besides its code: stdin (UTF-8 text) and command-line arguments.
    stdin = models.TextField(blank=True)
    args = models.JSONField(default=list, blank=True)
    # Files staged into /input that are neither datasets nor outputs (a check run's view of the
    # student's results): [{"name": "stdout", "path": <storage name>, "sha256": <hex>}, ...]
    staged_files = models.JSONField(default=list, blank=True)
    # The run's egress policy as asked and checked (runner.spec.RunSpec.egress): ["host:port",
    # "*.suffix:port", ...]; empty: no network. And what its proxy recorded (RunResult.egress:
    # the policy, each attempt, the totals, the cap passed; playground/egress.py), null without one.
    egress = models.JSONField(default=list, blank=True)
    egress_record = models.JSONField(null=True, blank=True)
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
    vm_start = models.CharField(max_length=8, blank=True)  # a microVM's: "cold" or "branch"
    sandbox_start = models.CharField(max_length=8, blank=True)  # "ready" (runner.ready) or "cold"
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

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        # Given to the accounts whose bearer tokens Prometheus scrapes /metrics with.
        permissions = [("view_metrics", "Can read the Prometheus metrics (/metrics)")]

    def __str__(self) -> str:
        return f"run {self.id}"

    @cached_property
    def decoded_limits(self) -> Limits:
        """The run's limits (stored as Limits.to_json) as runner.spec.Limits: decoded once for the
        row read, however many steps of the run's work ask (its spec, its finish, a rerun)."""
        return Limits.from_json(self.limits)

    @property
    def cell_record(self) -> RunCell | None:
        """Its notebook cell's record (RunCell) if it is a cell's run, else None; read once."""
        try:
            return self.cell
        except RunCell.DoesNotExist:
            return None

    @property
    def is_grading(self) -> bool:
        """A grading run (a test or a check, RunKind): read by the course's staff only, queued on the
        grading queue, run at background CPU weight, settled into its submission when it ends."""
        return self.kind != RunKind.RUN

    @property
    def outcome_shown(self) -> str:
        """The outcome in plain words ("out of memory"); empty while there is none."""
        try:
            return Outcome(self.outcome).words if self.outcome else ""
        except ValueError:  # not one of today's outcomes: said as it is
            return str(self.outcome).replace("_", " ")

    @property
    def engine_shown(self) -> str:
        """The engine as a person reads it: its name, and its isolation only where that says more
        ("namespace"; "smolvm (microVM)")."""
        isolation = ISOLATION_WORDS.get(self.isolation, self.isolation)
        if not self.engine:
            return isolation or "-"
        return self.engine if isolation in ("", self.engine) else f"{self.engine} ({isolation})"


class RunEvent(models.Model):
    """One row per state change: the audit trail and the source of truth for progress."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=16)
    # When it happened: a worker writes a run's phases in one transaction after the fact
    # (services/execution.py), each with the time the supervisor announced it.
    at = models.DateTimeField(default=timezone.now, editable=False)
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


class RunCell(models.Model):
    """A notebook cell's run (runner.cells): the run whose state it started from, and what its cell
    program left: the snapshot of its names (a file the host stores and never reads, staged into
    the same user's next cell), the manifest of those names and what did not carry, its displays
    (text sanitised at finish, images as stored files). Purged with the run's outputs."""

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="cell")
    notebook = models.ForeignKey("Notebook", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    cell_id = models.CharField(max_length=64, blank=True)
    state_from = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state_file = models.FileField(upload_to="states/%Y/%m/", max_length=300, blank=True)
    state_bytes = models.BigIntegerField(null=True, blank=True)
    state_sha256 = models.CharField(max_length=64, blank=True)
    # cell.json's facts, checked: {"variables", "not_carried", "modules", "restored", "error", "state", ...}
    manifest = models.JSONField(default=dict, blank=True)
    # In order: {"mime", "text"} | {"mime": "image/...", "path", "size", "sha256"} | {"mime": TABLE, "table"},
    # each with "plain" (its text/plain form), as services/cells.py made them.
    displays = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"cell {self.cell_id} of run {self.run_id}"


class CleanupCheck(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="cleanup_checks")
    name = models.CharField(max_length=64)
    ok = models.BooleanField()
    detail = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name}: {'passed' if self.ok else 'FAILED'}"


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
