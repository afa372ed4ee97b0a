"""The classroom's records: courses, members and invitations, assignments with their tests,
submissions and their results, late days, extensions, rubrics and adjustments, similarity reports."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from playground.models.datasets import Dataset
from playground.models.runs import Run


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
