"""What the classroom's API takes and answers: its request bodies (BodyIn, every field bounded) and
the shapes of its answers. Which fields a viewer actually receives is decided in shapes.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from ninja import Field, Schema

from playground.api.schemas import MAX_IDS, DatasetOut, RuntimeName
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


class MyProgressOut(Schema):
    score: float | None
    state: str | None
    attempts_used: int
    attempts_left: int | None = Field(description="null: unlimited")
    submission_id: UUID | None
    late: bool


class AssignmentSummaryOut(Schema):
    id: UUID
    title: str
    runtime: str
    opens_at: datetime | None
    due_at: datetime | None
    max_score: float
    attempts_allowed: int
    accept_late: bool
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
    run_id: UUID | None = None
    check_run_id: UUID | None = None


class SubmissionSummaryOut(Schema):
    id: UUID
    assignment_id: UUID
    student: str
    state: str
    score: float | None
    max_score: float
    charged: bool | None
    late: bool
    attempt: int | None = Field(description="which counted attempt this is (null: not counted, or not yet)")
    note: str
    created_at: datetime
    graded_at: datetime | None


class SubmissionOut(SubmissionSummaryOut):
    code: str
    tests: list[TestResultOut]


class GradeCellOut(Schema):
    assignment_id: UUID
    score: float | None
    state: str
    attempts: int
    late: bool
    submission_id: UUID


class GradeRowOut(Schema):
    username: str
    cells: list[GradeCellOut | None]


class GradebookAssignmentOut(Schema):
    id: UUID
    title: str
    max_score: float


class GradebookOut(Schema):
    assignments: list[GradebookAssignmentOut]
    students: list[GradeRowOut]


class CourseDatasetOut(DatasetOut):
    can_delete: bool = Field(
        description="an instructor may delete any course dataset, an assistant those they uploaded"
    )
