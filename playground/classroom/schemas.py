"""What the classroom's API takes and answers: its request bodies (BodyIn, every field bounded) and
the shapes of its answers. Which fields a viewer actually receives is decided in shapes.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from ninja import Field, Schema

from playground.api.schemas import MAX_IDS, DatasetOut, EnvironmentName, RuntimeName
from playground.bodies import NOT_BLANK, BodyIn, Bool, DateTime, Int, Number, Text
from playground.classroom import courses as course_services
from playground.egress import SiteEgressPolicy
from playground.limits import LimitsCeilingIn, LimitsIn
from runner.spec import RUNTIMES

# A title or a name that is not blank (the services strip it: one of spaces only is refused).
Title = Annotated[str, Field(min_length=1, max_length=200, pattern=NOT_BLANK)]


class CoursePatchIn(BodyIn):
    title: Title | None = None
    allowed_runtimes: list[RuntimeName] | None = Field(default=None, min_length=1, max_length=len(RUNTIMES))
    limits_ceiling: LimitsCeilingIn | None = None  # type: ignore[valid-type]
    egress_ceiling: SiteEgressPolicy | None = Field(
        default=None, description="what the course's runs may reach at most, within this service's ceiling; "
        "empty: no network for any of its runs"
    )  # fmt: skip
    require_vm: Bool | None = None
    quota_concurrent_runs: Int | None = Field(default=None, ge=1, le=100_000)
    quota_runs_per_hour: Int | None = Field(default=None, ge=1, le=100_000)
    late_days: Int | None = Field(default=None, ge=0, le=365, description="late days each student may spend")
    late_days_per_assignment: Int | None = Field(default=None, ge=0, le=365, description="at most on one assignment")


class CourseIn(CoursePatchIn):
    title: Title


class CourseOut(Schema):
    id: UUID
    title: str
    role: str
    join_code: str | None = Field(description="staff only; null when joining is closed")
    join_open: bool
    allowed_runtimes: list[str]
    limits_ceiling: dict[str, float]
    egress_ceiling: list[str]
    require_vm: bool
    quota_concurrent_runs: int
    quota_runs_per_hour: int
    late_days: int
    late_days_per_assignment: int
    created_at: datetime
    students: int
    staff: int


class JoinIn(BodyIn):
    join_code: Text = Field(max_length=64)


class JoinCodeIn(BodyIn):
    action: Literal["rotate", "close"]


class MembershipOut(Schema):
    course_id: UUID
    course_title: str
    username: str
    email: str
    role: str
    joined_at: datetime


class RoleIn(BodyIn):
    role: Literal["instructor", "assistant", "student"]


class RosterOut(Schema):
    invited: int
    already_members: int
    already_invited: int
    invalid: list[str]


class CourseInvitationOut(Schema):
    id: int
    identifier: str
    role: str
    created_at: datetime
    accepted_at: datetime | None
    accepted_by: str | None


class MyInvitationOut(Schema):
    id: int
    course_id: UUID
    course_title: str
    role: str
    created_at: datetime


class TestIn(BodyIn):
    name: Title
    points: Number = Field(default=1, ge=0, le=1000)
    visibility: Literal["visible", "hidden", "after_due"] = "visible"
    stdin: Text = ""
    args: list[Text] = Field(default=[], max_length=64)
    expected_stdout: Text | None = None
    match: Literal["exact", "strip", "regex"] = "strip"
    check_code: Text | None = None
    check_runtime: RuntimeName | None = None


class AssignmentIn(BodyIn):
    title: Title
    instructions: Text = ""
    runtime: RuntimeName
    environment: EnvironmentName = Field(
        default="",
        description="where its runs (the Run button, each test's) "
        "run: an environment of its runtime (GET /api/environments); blank: the runtime's own",
    )
    starter_code: Text = ""
    dataset_ids: list[UUID] = Field(default=[], max_length=MAX_IDS)
    limits: LimitsIn = Field(default_factory=LimitsIn)  # type: ignore[valid-type]
    egress: SiteEgressPolicy = Field(
        default=[], description="what its runs (the Run button, each test's) may reach, within the course's "
        "egress ceiling; a check program has no network"
    )  # fmt: skip
    opens_at: DateTime | None = None
    due_at: DateTime | None = None
    attempts_allowed: Int = Field(default=0, ge=0, le=10_000)
    accept_late: Bool = False
    tests: list[TestIn] = Field(default=[], max_length=course_services.MAX_TESTS)
    publish: Bool = Field(
        default=False, description="publish it now (students see it at its open time); otherwise a new assignment "
        "is a draft, and publishing is POST .../publish after reading GET .../publication"
    )  # fmt: skip


class LateDaysOut(Schema):
    allowed: int
    per_assignment: int
    used: int
    left: int
    on_this_assignment: int
    text: str = Field(description='in words, e.g. "1 late day used, 2 left"; empty when the course gives none')


class MyProgressOut(Schema):
    score: float | None = Field(description="the final score: the tests' plus the staff's adjustments")
    state: str | None
    attempts_used: int
    attempts_left: int | None = Field(description="null: unlimited")
    submission_id: UUID | None
    late: bool
    due_at: datetime | None = Field(description="the student's own due time (an extension's, else the assignment's)")
    extended: bool
    late_days: LateDaysOut


class PublishIn(BodyIn):
    confirm: Bool = Field(description="true: the caller has read what students will see (GET .../publication)")


class PublicationOut(Schema):
    published: bool
    published_at: datetime | None
    title: str
    runtime: str
    opens_at: datetime | None
    due_at: datetime | None
    visible_now: bool = Field(description="whether students see it as soon as it is published (it has opened)")
    instructions_bytes: int
    starter_code_lines: int
    datasets: list[str]
    attempts_allowed: int
    accept_late: bool
    max_score: float
    tests_with_details: list[str] = Field(description="visible tests: students see stdin, args and expectation")
    tests_after_due: list[str] = Field(description="their details are shown once the student's due time passed")
    tests_name_and_points_only: list[str] = Field(description="hidden tests: their name, points and pass/fail")


class ExtensionIn(BodyIn):
    student: Text = Field(max_length=150, description="the student's username")
    due_at: DateTime
    reason: Text = Field(default="", max_length=300)


class ExtensionOut(Schema):
    student: str
    due_at: datetime
    reason: str
    granted_by: str | None
    granted_at: datetime


class RubricItemIn(BodyIn):
    label: Title
    # Not 0 (an item that moves no score is refused, invalid_points): the document says so too.
    points: Number = Field(ge=-1000, le=1000, json_schema_extra={"not": {"const": 0}})


class RubricIn(BodyIn):
    items: list[RubricItemIn] = Field(max_length=50)


class RubricItemOut(Schema):
    id: int
    label: str
    points: float


class AdjustmentIn(BodyIn):
    points: Number | None = Field(default=None, ge=-1000, le=1000, description="default: the rubric item's")
    comment: Text = Field(default="", max_length=2000, description="default: the rubric item's label")
    rubric_item_id: Int | None = None


class AdjustmentOut(Schema):
    id: int
    points: float
    comment: str
    by: str
    at: datetime
    rubric_item_id: int | None
    withdrawn_at: datetime | None = None
    withdrawn_by: str | None = None


class QueueOut(Schema):
    place: int = Field(description="1: no other student's tests run before this submission's first")
    runs_ahead: int = Field(description="grading runs that start before this submission's last one")
    estimate_s: int = Field(description="about how long until it is graded, from the queue and recent runs")


class AssignmentSummaryOut(Schema):
    id: UUID
    title: str
    runtime: str
    opens_at: datetime | None
    due_at: datetime | None
    max_score: float
    attempts_allowed: int
    accept_late: bool
    published: bool
    my: MyProgressOut | None


class TestOut(Schema):
    id: int | None = None
    name: str
    points: float
    visibility: str
    stdin: str | None = None
    args: list[str] | None = None
    expected_stdout: str | None = None
    match: str | None = None
    check_code: str | None = None
    check_runtime: str | None = None


class AssignmentOut(Schema):
    id: UUID
    course_id: UUID
    course_title: str
    title: str
    instructions: str
    instructions_html: str
    runtime: str
    environment: str = Field(description="where its runs run (blank: the runtime's own image)")
    starter_code: str
    datasets: list[DatasetOut]
    limits: dict[str, float]
    egress: list[str]
    opens_at: datetime | None
    due_at: datetime | None
    past_due: bool
    attempts_allowed: int
    accept_late: bool
    max_score: float
    tests_version: int
    is_staff: bool
    published: bool
    published_at: datetime | None
    rubric: list[RubricItemOut] = Field(description="staff only (empty for a student)")
    tests: list[TestOut]
    my: MyProgressOut | None


class RegradeOut(Schema):
    regrading: int


class TryIn(BodyIn):
    code: Text
    stdin: Text = ""
    args: list[Text] = Field(default=[], max_length=64)


class SubmissionIn(BodyIn):
    code: Text


class TestResultOut(Schema):
    name: str
    points: float
    visibility: str
    status: str
    status_text: str
    score: float | None
    detail: str | None = None
    diff: str | None = None
    feedback: str | None = None
    stdin: str | None = None
    args: list[str] | None = None
    expected_stdout: str | None = None
    stderr_tail: str | None = Field(
        default=None,
        description="a test the student may see and did not pass: the end of their program's stderr (a traceback)",
    )
    stdout: str | None = Field(default=None, description="staff: the end of the program's stdout (64 KiB)")
    stderr: str | None = Field(default=None, description="staff: the end of the program's stderr (64 KiB)")
    run_id: UUID | None = None
    check_run_id: UUID | None = None


class SubmissionSummaryOut(Schema):
    id: UUID
    assignment_id: UUID
    student: str
    state: str
    score: float | None = Field(description="the tests' score")
    max_score: float
    adjustment: float = Field(description="the staff's standing adjustments, summed")
    final_score: float | None = Field(description="score + adjustment, never below 0; null until graded")
    charged: bool | None
    late: bool
    late_days: int = Field(description="late days this submission spent")
    attempt: int | None = Field(description="which counted attempt this is (null: not counted, or not yet)")
    note: str
    created_at: datetime
    graded_at: datetime | None


class SubmissionOut(SubmissionSummaryOut):
    code: str
    tests: list[TestResultOut]
    adjustments: list[AdjustmentOut]
    queue: QueueOut | None = Field(description="while it waits for grading slots: its place and an estimate")


class GradeCellOut(Schema):
    assignment_id: UUID
    score: float | None = Field(description="the final score: the tests' plus the adjustments")
    tests_score: float | None
    adjustment: float
    state: str
    attempts: int
    late: bool
    late_days: int
    submission_id: UUID


class GradeRowOut(Schema):
    username: str
    cells: list[GradeCellOut | None]


class GradebookAssignmentOut(Schema):
    id: UUID
    title: str
    max_score: float
    published: bool


class AttemptOut(Schema):
    id: UUID
    attempt: int | None = Field(description="which counted attempt (null: not counted)")
    created_at: datetime
    state: str
    score: float | None
    final_score: float | None
    late: bool
    late_days: int


class StudentAssignmentOut(Schema):
    id: UUID
    title: str
    max_score: float
    published: bool
    due_at: datetime | None = Field(description="the student's own (an extension's, else the assignment's)")
    extended: bool
    late_days: int
    attempts: list[AttemptOut]


class StudentLateDaysOut(Schema):
    allowed: int
    used: int
    left: int


class StudentRecordOut(Schema):
    username: str
    late_days: StudentLateDaysOut
    assignments: list[StudentAssignmentOut]


class GradebookOut(Schema):
    assignments: list[GradebookAssignmentOut]
    students: list[GradeRowOut]


class CourseDatasetOut(DatasetOut):
    can_delete: bool = Field(
        description="an instructor may delete any course dataset, an assistant those they uploaded"
    )


class SimilarityIn(BodyIn):
    threshold: Number | None = Field(
        default=None,
        ge=0.05,
        le=1,
        description="default 0.5: a pair is reported when "
        "either side has at least this share of its code in common with the other",
    )


class SimilaritySideOut(Schema):
    student: str
    submission_id: UUID
    share: float = Field(description="the share of this side's fingerprinted code found in the other")


class SimilarityPairSummaryOut(Schema):
    similarity: float
    a: SimilaritySideOut
    b: SimilaritySideOut


class SimilarityReportOut(Schema):
    id: UUID
    assignment_id: UUID
    state: Literal["queued", "running", "done", "failed"]
    threshold: float
    done: int = Field(description="steps done (fingerprinting batches, then comparisons of blocks)")
    total: int
    submissions: int = Field(description="students' latest submissions compared")
    note: str = Field(description="submissions left out, and why (too large)")
    error: str
    created_at: datetime
    finished_at: datetime | None
    requested_by: str | None
    pairs: list[SimilarityPairSummaryOut] = Field(description="at or above the threshold, most similar first")


class SimilarityCodeOut(SimilaritySideOut):
    code: str
    gone: bool = Field(description="the submission was deleted since the report")
    regions: list[list[int]] = Field(
        description="[start, end, first line, last line]: characters [start, end) (code points) of the code, on "
        "those lines (from 1), that match the other side"
    )


class SimilarityPairOut(Schema):
    report_id: UUID
    index: int
    similarity: float
    a: SimilarityCodeOut
    b: SimilarityCodeOut


# What GET answers of each may be sent back as it is (bodies.BodyIn.answered_by).
TestIn.answered_by = TestOut
AssignmentIn.answered_by = AssignmentOut
CoursePatchIn.answered_by = CourseOut
