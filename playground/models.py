"""Cordon's records: datasets, runs and their audit trail (events, outputs, cleanup checks),
images, worker hosts and API tokens. Writes go through playground/services/, reads through
playground/selectors/, one module per domain in each.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from runner.spec import Outcome, Phase


class Dataset(models.Model):
    """A user's file, staged read-only into /input of the runs that name it. A course dataset
    (course set) is uploaded by the course's staff (its owner) and read by its members' runs."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    course = models.ForeignKey("Course", null=True, blank=True, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=128)
    file = models.FileField(upload_to="datasets/%Y/%m/", max_length=300)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    sniffed_type = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    # An upload of the same name that replaced this one: new runs read it instead (a notebook
    # cell's input, a run's or an assignment's dataset_ids naming this one); runs made before
    # keep this version, which stays stored until the dataset is deleted. Always the newest.
    replaced_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="earlier_versions"
    )
    replaced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"], condition=models.Q(course=None, replaced_at=None),
                name="dataset_name_per_owner_current",
            ),
            models.UniqueConstraint(
                fields=["course", "name"], condition=~models.Q(course=None) & models.Q(replaced_at=None),
                name="dataset_name_per_course_current",
            ),
        ]  # fmt: skip

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


class Notebook(models.Model):
    """A user's named notebook: ordered cells (services/notebooks.py has their shape), saved
    whole by the page with the version it read, so that a stale tab cannot overwrite newer work."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notebooks")
    name = models.CharField(max_length=100)
    cells = models.JSONField(default=list)
    # The runtime a new code cell takes ("python" or "node"); each cell keeps its own.
    runtime = models.CharField(max_length=16, default="python")
    # Where its cells run (playground.environments): a code cell of the environment's runtime runs
    # in it, one of another runtime in that runtime's own image. Blank: the site's default.
    environment = models.CharField(max_length=64, blank=True)
    cell_count = models.PositiveIntegerField(default=0)  # len(cells), kept with them: a list reads no cells
    version = models.PositiveIntegerField(default=1)
    # Raised by a cell's run or clear (which set a cell's last run, not a new version): a save that
    # read the cells before one merges them again.
    runs_version = models.PositiveIntegerField(default=0)
    # The notebook's own inputs, staged for every code cell: [{"kind": "dataset", "id", "name"}].
    inputs = models.JSONField(default=list, blank=True)
    # "Restart (clear state)": a cell's run before this passes no state down (the cells below
    # start from nothing until the cells above run again).
    restarted_at = models.DateTimeField(null=True, blank=True)
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


# --- classrooms ---------------------------------------------------------------------------


class Course(models.Model):
    """A course: its people (Membership), datasets (Dataset.course), assignments and policy. The
    policy caps every run of the course under the operator's maxima: allowed runtimes, a limits
    ceiling (a partial Limits: what it leaves out is capped by the operator's maximum only),
    an egress ceiling (what its runs may reach), microVMs required or not, and per-student quotas
    for the Run button."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    title = models.CharField(max_length=200)
    join_code = models.CharField(max_length=16, unique=True, null=True, blank=True)  # None: joining closed
    allowed_runtimes = models.JSONField(default=list)
    limits_ceiling = models.JSONField(default=dict, blank=True)
    # The destinations the course's runs may reach at most (within the operator's ceiling); empty,
    # the default: no run of the course gets a network.
    egress_ceiling = models.JSONField(default=list, blank=True)
    require_vm = models.BooleanField(default=False)
    quota_concurrent_runs = models.PositiveIntegerField(default=2)
    quota_runs_per_hour = models.PositiveIntegerField(default=60)
    # Late days: tokens each student may spend on late submissions (whole days, spent automatically),
    # at most late_days_per_assignment on one assignment. 0: none.
    late_days = models.PositiveIntegerField(default=0)
    late_days_per_assignment = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="courses_created"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class Role(models.TextChoices):
    INSTRUCTOR = "instructor"
    ASSISTANT = "assistant"
    STUDENT = "student"


STAFF_ROLES = (Role.INSTRUCTOR, Role.ASSISTANT)


class Membership(models.Model):
    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    joined_at = models.DateTimeField(auto_now_add=True)
    # When this student's grading was last served a slot: the round-robin's order (oldest first).
    served_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["role", "user__username"]
        constraints = [models.UniqueConstraint(fields=["course", "user"], name="one_membership_per_course")]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) in {self.course}"


class CourseInvitation(models.Model):
    """A roster line: a username or an email address invited to join as a student (or assistant);
    the user it names accepts it from their courses page."""

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="invitations")
    identifier = models.CharField(max_length=254)  # a username, or an email address (lowercased)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STUDENT)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="course_invitations_sent"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="course_invitations_accepted",
    )  # fmt: skip
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["identifier"]
        constraints = [models.UniqueConstraint(fields=["course", "identifier"], name="one_invitation_per_identifier")]

    def __str__(self) -> str:
        return f"{self.identifier} to {self.course}"


class Assignment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="assignments")
    title = models.CharField(max_length=200)
    instructions = models.TextField(blank=True)  # markdown
    instructions_html = models.TextField(blank=True)  # rendered and sanitised when saved; reads never render
    runtime = models.CharField(max_length=16)
    environment = models.CharField(max_length=64, blank=True)  # its runs' image; blank: the runtime's own
    starter_code = models.TextField(blank=True)
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="assignments")
    limits = models.JSONField(default=dict)
    egress = models.JSONField(default=list, blank=True)  # the policy of its runs (Run button, tests)
    opens_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    attempts_allowed = models.PositiveIntegerField(default=0)  # 0: unlimited
    accept_late = models.BooleanField(default=False)
    tests_version = models.PositiveIntegerField(default=1)  # raised by every change of the tests
    # None: a draft, which no student sees (404 everywhere); set by publishing.
    published_at = models.DateTimeField(null=True, blank=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["due_at", "created_at"]

    def __str__(self) -> str:
        return self.title


class Visibility(models.TextChoices):
    VISIBLE = "visible"
    HIDDEN = "hidden"
    AFTER_DUE = "after_due"


class Match(models.TextChoices):
    EXACT = "exact"
    STRIP = "strip"
    REGEX = "regex"


class AssignmentTest(models.Model):
    """One test: the student's code run with `stdin` and `args`, passed by an expected stdout
    (`expected_stdout` with `match`) or by the instructor's check program (`check_code`, run in a
    sandbox of its own over the student's results). Never staged into the student's sandbox."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="tests")
    position = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=200)
    points = models.FloatField(default=1)
    visibility = models.CharField(max_length=16, choices=Visibility.choices, default=Visibility.VISIBLE)
    stdin = models.TextField(blank=True)
    args = models.JSONField(default=list, blank=True)
    expected_stdout = models.TextField(null=True, blank=True)
    match = models.CharField(max_length=8, choices=Match.choices, default=Match.STRIP)
    check_code = models.TextField(blank=True)
    check_runtime = models.CharField(max_length=16, blank=True)  # blank: the assignment's runtime

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.name


class SubmissionState(models.TextChoices):
    QUEUED = "queued"  # waiting for grading slots
    GRADING = "grading"  # some of its tests are running
    GRADED = "graded"  # every test has a result: scored and charged
    NOT_GRADED = "not_graded"  # grading failed for a reason not the student's: not charged


class Submission(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="submissions")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submissions")
    code = models.TextField()
    state = models.CharField(max_length=16, choices=SubmissionState.choices, default=SubmissionState.QUEUED)
    score = models.FloatField(null=True, blank=True)
    max_score = models.FloatField(default=0)
    # Counted as an attempt: None while grading, True once graded, False if not graded.
    charged = models.BooleanField(null=True)
    late = models.BooleanField(default=False)
    late_days = models.PositiveSmallIntegerField(default=0)  # late days this submission spent
    tests_version = models.PositiveIntegerField(default=1)
    note = models.CharField(max_length=500, blank=True)  # what the student is told (retries, errors)
    adjustment = models.FloatField(default=0)  # the sum of its standing ScoreAdjustments
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    graded_at = models.DateTimeField(null=True, blank=True)
    regraded = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"submission {self.id}"

    @property
    def counted(self) -> bool:
        """Whether it counts as an attempt: graded (charged), or still being graded."""
        return self.charged is not False

    @property
    def final_score(self) -> float | None:
        """The tests' score plus the staff's adjustments (never below 0); None until graded."""
        if self.score is None:
            return None
        return max(0.0, round(self.score + self.adjustment, 4))


class TestStatus(models.TextChoices):
    PENDING = "pending"  # waiting for a grading slot
    RUNNING = "running"  # the student's code runs under the test
    CHECKING = "checking"  # the check program runs over its results
    PASSED = "passed"
    FAILED = "failed"  # the program ended, but its output did not pass
    # otherwise the student run's own outcome (timed_out, memory_limit, ...): failed, in plain words
    NOT_GRADED = "not_graded"  # infrastructure failed every try: not the student's


class TestResult(models.Model):
    """One test of one submission: the test as it was when grading began (`spec`: stdin, args,
    expectation or checker, so an edit mid-grading cannot mix two versions), the student's run,
    the check run, and the result."""

    __test__ = False  # not a pytest class

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="results")
    test = models.ForeignKey(AssignmentTest, null=True, on_delete=models.SET_NULL, related_name="results")
    position = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=200)
    points = models.FloatField(default=1)
    visibility = models.CharField(max_length=16, choices=Visibility.choices)
    spec = models.JSONField(default=dict)
    status = models.CharField(max_length=24, default=TestStatus.PENDING, db_index=True)
    outcome = models.CharField(max_length=24, blank=True)  # the student run's outcome
    exit_code = models.IntegerField(null=True, blank=True)
    score = models.FloatField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True)  # plain words: why it failed
    diff = models.TextField(blank=True)  # expected vs got, for a failed expected-stdout test
    feedback = models.TextField(blank=True)  # the check program's stdout
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="test_results")
    check_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="check_results")
    tries = models.PositiveSmallIntegerField(default=0)  # grading runs started (infrastructure retries)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.name}: {self.status}"


class GradingLock(models.Model):
    """One row, locked while grading slots are handed out (classroom/grading.py), so that two
    processes handing them out at once cannot both count the same free slot. (On SQLite every
    write transaction is IMMEDIATE and serialises already.)"""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)


class StoredFile(models.Model):
    """A file kept by the database storage (playground/storage.py, CORDON_STORAGE=database): its
    name, size and sha256, the content in StoredChunk rows. A file and its chunks are written in
    one transaction, so a writer that dies mid-upload leaves nothing visible."""

    name = models.CharField(max_length=255, unique=True)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class StoredChunk(models.Model):
    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["file", "index"], name="stored_chunk_unique_index")]


class Extension(models.Model):
    """One student's own due time for one assignment (instead of the assignment's)."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="extensions")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="extensions")
    due_at = models.DateTimeField()
    reason = models.CharField(max_length=300, blank=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    granted_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["assignment", "student"], name="extension_one_per_student")]

    def __str__(self) -> str:
        return f"extension to {self.due_at:%Y-%m-%d %H:%M}"


class LateDaySpend(models.Model):
    """Late days a student spent on one assignment (the most any of its submissions needed)."""

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="late_day_spends")
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="late_day_spends")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="late_day_spends")
    days = models.PositiveSmallIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["assignment", "student"], name="late_days_one_per_assignment")]

    def __str__(self) -> str:
        return f"{self.days} late day(s)"


class RubricItem(models.Model):
    """A reusable manual adjustment of an assignment: a label and its points (negative: a deduction)."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="rubric_items")
    position = models.PositiveIntegerField(default=0)
    label = models.CharField(max_length=200)
    points = models.FloatField()

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.label


class ScoreAdjustment(models.Model):
    """Points a member of staff added to (or took from) a submission, with a comment; withdrawn
    ones are kept, with who withdrew them and when."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="adjustments")
    points = models.FloatField()
    comment = models.CharField(max_length=2000)
    rubric_item = models.ForeignKey(RubricItem, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    by_username = models.CharField(max_length=150)  # kept if the account goes
    at = models.DateTimeField(auto_now_add=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    withdrawn_by_username = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.points:+g}: {self.comment[:40]}"


class SimilarityReport(models.Model):
    """A similarity report over an assignment's latest submissions, made in the background by
    tokenising the code (never running it): the pairs over the threshold, with their matching regions."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="similarity_reports")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    threshold = models.FloatField()
    done = models.PositiveIntegerField(default=0)  # pairs compared so far
    total = models.PositiveIntegerField(default=0)
    submissions = models.JSONField(default=list)  # [{"key": submission id, "student": username}] compared
    pairs = models.JSONField(default=list)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"similarity report {self.id}"


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


class ReceiptChain(models.Model):
    """The head of one host's chain of run receipts (the host that wrote them: CORDON_HOST_NAME).
    Its row is locked while a receipt is added, so two processes, on one host or, with PostgreSQL,
    on several, never take the same place in a chain; and it says how long the chain is, so a
    receipt deleted from its end is missed (playground/selectors/receipts.py)."""

    host = models.CharField(max_length=128, unique=True)
    length = models.PositiveBigIntegerField(default=0)
    head = models.CharField(max_length=64, blank=True)  # the sha256 of its last receipt

    def __str__(self) -> str:
        return f"{self.host}: {self.length} receipts"


class Receipt(models.Model):
    """A finished run's receipt (runner/receipt.py): its facts as signed canonical JSON, chained to
    the previous receipt of the host that wrote it. Metadata only, never user data. It outlives
    its run (no constraint on `run`), so a deleted run row is named by the audit, not hidden."""

    run = models.OneToOneField(
        Run, on_delete=models.DO_NOTHING, db_constraint=False, related_name="receipt", editable=False
    )
    host = models.CharField(max_length=128)
    sequence = models.PositiveBigIntegerField()  # 1, 2, ... in its host's chain
    prev_hash = models.CharField(max_length=64, blank=True)  # the previous receipt's sha256; blank for the first
    body = models.TextField()  # the canonical JSON that was hashed and signed, exactly
    sha256 = models.CharField(max_length=64, unique=True)
    signature = models.CharField(max_length=128)  # Ed25519, base64
    key_id = models.CharField(max_length=32)
    issued_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["host", "sequence"]
        constraints = [models.UniqueConstraint(fields=["host", "sequence"], name="receipt_place_per_host")]

    def __str__(self) -> str:
        return f"receipt {self.host} #{self.sequence}"
