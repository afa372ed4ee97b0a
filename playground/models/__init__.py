"""Cordon's records, a module per domain: runs (and their audit trail: events, outputs, a cell's
record, cleanup checks, staff reads), datasets, notebooks, accounts (tokens, invites, purges), hosts
(images, worker hosts), the classroom, stored files (the database storage), SSO links and receipts.
The tables are the app's (label `playground`), whatever module declares them. Writes go through
playground/services/, reads through playground/selectors/, one module per domain in each; code
imports the models from here."""

from playground.models.accounts import ApiToken, Invite, Purge
from playground.models.classroom import (
    STAFF_ROLES,
    Assignment,
    AssignmentTest,
    Course,
    CourseInvitation,
    Extension,
    GradingLock,
    LateDaySpend,
    Match,
    Membership,
    Role,
    RubricItem,
    ScoreAdjustment,
    SimilarityReport,
    Submission,
    SubmissionState,
    TestResult,
    TestStatus,
    Visibility,
)
from playground.models.datasets import Dataset
from playground.models.hosts import RuntimeImage, WorkerHost
from playground.models.notebooks import Notebook
from playground.models.receipts import Receipt, ReceiptChain
from playground.models.runs import (
    ACTIVE_STATES,
    ISOLATION_WORDS,
    WORKER_STATES,
    CleanupCheck,
    Run,
    RunCell,
    RunEvent,
    RunKind,
    RunOutputFile,
    RunQuerySet,
    RunState,
    StaffAccess,
)
from playground.models.sso import SsoIdentity
from playground.models.stored_files import StoredChunk, StoredFile

__all__ = [
    "ACTIVE_STATES",
    "ISOLATION_WORDS",
    "STAFF_ROLES",
    "WORKER_STATES",
    "ApiToken",
    "Assignment",
    "AssignmentTest",
    "CleanupCheck",
    "Course",
    "CourseInvitation",
    "Dataset",
    "Extension",
    "GradingLock",
    "Invite",
    "LateDaySpend",
    "Match",
    "Membership",
    "Notebook",
    "Purge",
    "Receipt",
    "ReceiptChain",
    "Role",
    "RubricItem",
    "Run",
    "RunCell",
    "RunEvent",
    "RunKind",
    "RunOutputFile",
    "RunQuerySet",
    "RunState",
    "RuntimeImage",
    "ScoreAdjustment",
    "SimilarityReport",
    "SsoIdentity",
    "StaffAccess",
    "StoredChunk",
    "StoredFile",
    "Submission",
    "SubmissionState",
    "TestResult",
    "TestStatus",
    "Visibility",
    "WorkerHost",
]
