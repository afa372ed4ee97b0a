"""Courses: creation, policy, joining (a code or link the instructor rotates or closes), roster
imports (invitations by username or email), members' roles, and assignments with their tests.
Who may call what is checked by the callers through classroom/selectors.py; what is checked here is
the data: a policy within the operator's maxima, an assignment within its course's policy."""

from __future__ import annotations

import csv
import io
import itertools
import logging
import re
import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.utils import timezone
from pydantic import ValidationError

from playground import matching
from playground.classroom.selectors import course_by_join_code
from playground.environments import check_environment
from playground.errors import ServiceError
from playground.limits import LimitsIn, describe_validation_error, limits_set, over_maximum
from playground.markdown import SOURCE_MAX_BYTES as MARKDOWN_MAX_BYTES
from playground.markdown import render_bounded
from playground.models import (
    Assignment,
    AssignmentTest,
    Course,
    CourseInvitation,
    Dataset,
    Extension,
    Match,
    Membership,
    Role,
    Visibility,
)
from playground.selectors.datasets import current_versions
from playground.services.runs import check_egress, check_program_input
from runner.registry import requested_for
from runner.spec import RUNTIMES, Limits
from runner.units import size_words

log = logging.getLogger(__name__)

JOIN_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud in a classroom
JOIN_CODE_LENGTH = 8
MAX_TESTS = 50
MAX_TEST_TEXT = 256 * 1024  # a test's stdin, expected stdout or check program
MAX_ROSTER_LINES = 2000
_EMAIL = re.compile(r"\A[^@\s\x00]+@[^@\s\x00]+\Z")
_USERNAME = re.compile(r"\A[\w.@+-]{1,150}\Z")


# --- courses ------------------------------------------------------------------------------


def course_create(*, user: User, title: str, policy: dict[str, Any] | None = None) -> Course:
    with transaction.atomic():
        course = Course.objects.create(
            title=_title(title), created_by=user, join_code=_new_join_code(), allowed_runtimes=list(RUNTIMES)
        )
        Membership.objects.create(course=course, user=user, role=Role.INSTRUCTOR)
        if policy:
            course_update(course=course, changes=policy)
    return course


def course_update(*, course: Course, changes: dict[str, Any]) -> Course:
    """Title and policy. A lower ceiling applies to runs from now on; assignments whose limits
    are over it are capped when they run (effective_limits), not rewritten, and runs whose egress
    is outside it are refused when they are made or taken by a worker."""
    if "title" in changes:
        course.title = _title(changes["title"])
    if "allowed_runtimes" in changes:
        runtimes = list(dict.fromkeys(changes["allowed_runtimes"] or []))
        unknown = [r for r in runtimes if r not in RUNTIMES]
        if unknown or not runtimes:
            raise ServiceError(
                "invalid_policy", f"allowed_runtimes must be a non-empty list of {', '.join(RUNTIMES)}",
                field="allowed_runtimes", status=422,
            )  # fmt: skip
        course.allowed_runtimes = runtimes
    if "limits_ceiling" in changes:
        course.limits_ceiling = check_partial_limits(changes["limits_ceiling"] or {}, field="limits_ceiling")
    if "egress_ceiling" in changes:  # within the operator's ceiling, like any run's policy
        course.egress_ceiling = check_egress(changes["egress_ceiling"] or [], field="egress_ceiling")
    if "require_vm" in changes:
        course.require_vm = bool(changes["require_vm"])
    for quota, low, high in (("quota_concurrent_runs", 1, 100_000), ("quota_runs_per_hour", 1, 100_000),
                             ("late_days", 0, 365), ("late_days_per_assignment", 0, 365)):  # fmt: skip
        if quota in changes:
            value = changes[quota]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ServiceError(
                    "invalid_policy", f"{quota} must be a whole number from {low} to {high}", field=quota, status=422
                )
            setattr(course, quota, value)
    course.save()
    return course


def course_join_code(*, course: Course, action: str) -> Course:
    """Rotate the join code (the old one stops working at once) or close joining."""
    if action not in ("rotate", "close"):
        raise ServiceError("invalid_action", "action must be 'rotate' or 'close'", field="action", status=422)
    course.join_code = _new_join_code() if action == "rotate" else None
    course.save(update_fields=["join_code"])
    return course


def course_join(*, user: User, join_code: str) -> Membership:
    course = course_by_join_code(join_code)
    if course is None:
        raise ServiceError(
            "invalid_join_code", "no course has this join code (it may have been rotated or closed)",
            field="join_code", status=404,
        )  # fmt: skip
    return _add_member(course=course, user=user, role=Role.STUDENT)


def invitation_accept(*, user: User, invitation: CourseInvitation) -> Membership:
    with transaction.atomic():
        membership = _add_member(course=invitation.course, user=user, role=invitation.role)
        CourseInvitation.objects.filter(id=invitation.id).update(accepted_by=user, accepted_at=timezone.now())
    return membership


def _add_member(*, course: Course, user: User, role: str) -> Membership:
    existing = Membership.objects.filter(course=course, user=user).first()
    if existing is not None:
        return existing  # joining twice is harmless; a role is changed by an instructor only
    try:
        with transaction.atomic():
            return Membership.objects.create(course=course, user=user, role=role)
    except IntegrityError:  # a parallel join won
        return Membership.objects.get(course=course, user=user)


def member_sync(*, course: Course, user: User, role: str) -> Membership:
    """The role another system's roster gives `user` in the course (an LMS's, through LTI): a new
    member joins with it, a member's role follows it, except that the last instructor stays one."""
    membership = Membership.objects.filter(course=course, user=user).first()
    if membership is None:
        return _add_member(course=course, user=user, role=role)
    if membership.role != role:
        try:
            return member_set_role(course=course, membership=membership, role=role)
        except ServiceError:
            log.info("classroom: kept %s instructor of course %s (its last)", user, course.id)
    return membership


def member_set_role(*, course: Course, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise ServiceError("invalid_role", f"role must be one of {', '.join(Role.values)}", field="role", status=422)
    if membership.role == Role.INSTRUCTOR and role != Role.INSTRUCTOR:
        _keep_an_instructor(course, membership)
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


def member_remove(*, course: Course, membership: Membership) -> None:
    if membership.role == Role.INSTRUCTOR:
        _keep_an_instructor(course, membership)
    membership.delete()


def _keep_an_instructor(course: Course, leaving: Membership) -> None:
    others = Membership.objects.filter(course=course, role=Role.INSTRUCTOR).exclude(id=leaving.id)
    if not others.exists():
        raise ServiceError(
            "last_instructor", "a course keeps at least one instructor; make another one first", status=409
        )


def roster_import(*, course: Course, by: User, data: bytes) -> dict[str, Any]:
    """One username or email per line (a header line is skipped; a second column may name the
    role: student or assistant). Each new one becomes an invitation its user accepts. A few
    queries whatever the roster's length (MAX_ROSTER_LINES), in one transaction."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ServiceError("invalid_roster", "the roster must be UTF-8 text (CSV)", field="file", status=422) from None
    rows = list(itertools.islice(csv.reader(io.StringIO(text)), MAX_ROSTER_LINES + 1))
    if len(rows) > MAX_ROSTER_LINES:
        raise ServiceError(
            "invalid_roster", f"more than {MAX_ROSTER_LINES} lines; at most {MAX_ROSTER_LINES} at once", field="file",
            status=422,
        )  # fmt: skip
    counts: dict[str, Any] = {"invited": 0, "already_members": 0, "already_invited": 0, "invalid": []}
    wanted: dict[str, str] = {}  # identifier -> role, the first line naming it wins
    for index, row in enumerate(rows):
        cells = [cell.strip() for cell in row]
        if not cells or not cells[0]:
            continue
        identifier = cells[0].lower()
        if index == 0 and identifier in ("username", "email", "identifier", "user"):
            continue
        role = cells[1].lower() if len(cells) > 1 and cells[1] else Role.STUDENT
        if role not in (Role.STUDENT, Role.ASSISTANT) or not (_EMAIL.match(identifier) or _USERNAME.match(identifier)):
            counts["invalid"].append(",".join(cells)[:200])
            continue
        if identifier in wanted:
            counts["already_invited"] += 1
            continue
        wanted[identifier] = role
    members = _members_named(course, list(wanted))
    with transaction.atomic():
        invited = set(
            CourseInvitation.objects.filter(course=course, identifier__in=list(wanted)).values_list(
                "identifier", flat=True
            )
        )
        new = []
        for identifier, role in wanted.items():
            if identifier in members:
                counts["already_members"] += 1
            elif identifier in invited:
                counts["already_invited"] += 1
            else:
                new.append(CourseInvitation(course=course, identifier=identifier, role=role, created_by=by))
        created = CourseInvitation.objects.bulk_create(new, ignore_conflicts=True)  # a parallel import's stay
        counts["invited"] = len(created)
    return counts


def _members_named(course: Course, identifiers: list[str]) -> set[str]:
    """The identifiers that name a member of the course already. An email address names the account
    with that email only (as invitations_for_user reads it), never one whose username merely is it."""
    members = Membership.objects.filter(course=course).annotate(
        email=Lower("user__email"), username=Lower("user__username")
    )  # fmt: skip
    emails = members.filter(email__in=[i for i in identifiers if "@" in i]).values_list("email", flat=True)
    names = members.filter(username__in=[i for i in identifiers if "@" not in i]).values_list("username", flat=True)
    return {*emails, *names}


def _new_join_code() -> str:
    while True:
        code = "".join(secrets.choice(JOIN_ALPHABET) for _ in range(JOIN_CODE_LENGTH))
        if not Course.objects.filter(join_code=code).exists():
            return code


def _title(value: Any) -> str:
    title = str(value or "").strip()
    if not title or len(title) > 200:
        raise ServiceError("invalid_title", "a title of 1 to 200 characters is needed", field="title", status=422)
    return title


# --- limits under a course's ceiling -------------------------------------------------------


def check_partial_limits(values: Any, *, field: str, ceiling: Limits | None = None) -> dict[str, Any]:
    """Some limits by name, as stored: checked by the API's own schema for them (names, types, the
    operator's maxima), whoever calls, then against `ceiling` (a course's), which no schema knows."""
    try:
        clean = limits_set(LimitsIn.model_validate(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join([field, *(str(part) for part in first["loc"])])
        code, message = describe_validation_error(dict(first), where) or ("invalid_limit", f"{where}: {first['msg']}")
        raise ServiceError(code, message, field=where, status=422) from None
    limits = Limits.from_json({**Limits().to_json(), **clean})
    for where, code, message in over_maximum(limits, ceiling, field=field, names=clean) if ceiling else ():
        raise ServiceError(code, message, field=where, status=422)
    return clean


def course_ceiling(course: Course) -> Limits:
    """The course's ceiling as whole Limits: its own caps, under the operator's maxima."""
    maxima = settings.CORDON_MAXIMA.to_json()
    own = {name: min(value, maxima[name]) for name, value in (course.limits_ceiling or {}).items() if name in maxima}
    return Limits.from_json({**maxima, **own})


def course_engine(course: Course) -> str:
    """What a course's runs ask for: a microVM's isolation when the course requires one, else auto."""
    return requested_for(require_vm=course.require_vm)


def effective_limits(course: Course, limits: dict[str, Any]) -> Limits:
    """A course run's limits: the defaults and the limits set (an assignment's), each capped by
    the course's ceiling (which the operator's maxima cap in turn)."""
    ceiling = course_ceiling(course).to_json()
    wanted = {**Limits().to_json(), **{k: v for k, v in limits.items() if k in ceiling}}
    return Limits.from_json({name: min(value, ceiling[name]) for name, value in wanted.items()})


# --- assignments --------------------------------------------------------------------------


def assignment_save(*, course: Course, data: dict[str, Any], assignment: Assignment | None = None) -> Assignment:
    """Create or replace an assignment and its tests, checked against the course's policy. A
    change of the tests raises tests_version (a regrade then grades with the new ones)."""
    title = _title(data.get("title"))
    runtime = data.get("runtime") or ""
    if runtime not in (course.allowed_runtimes or RUNTIMES):
        allowed = ", ".join(course.allowed_runtimes or RUNTIMES)
        raise ServiceError("runtime_not_allowed", f"this course allows {allowed}", field="runtime", status=422)
    environment = check_environment(data.get("environment") or "", runtime)
    limits = check_partial_limits(data.get("limits") or {}, field="limits", ceiling=course_ceiling(course))
    egress = check_egress(data.get("egress") or [], course=course)
    opens_at, due_at = data.get("opens_at"), data.get("due_at")
    if opens_at and due_at and due_at <= opens_at:
        raise ServiceError("invalid_dates", "due_at must be after opens_at", field="due_at", status=422)
    dataset_ids = [str(i) for i in data.get("dataset_ids") or []]
    found = current_versions(Dataset.objects.filter(course=course, id__in=dataset_ids))
    datasets = list({d.id: d for d in found.values()}.values())  # a replaced one: its replacement
    if len(found) != len(set(dataset_ids)):
        raise ServiceError(
            "dataset_not_found", "a dataset in dataset_ids is not one of this course's", field="dataset_ids",
            status=404,
        )  # fmt: skip
    if len(data.get("tests") or []) > MAX_TESTS:
        raise ServiceError("too_many_tests", f"at most {MAX_TESTS} tests", field="tests", status=422)
    tests = [_clean_test(test, index, runtime, course) for index, test in enumerate(data.get("tests") or [])]
    instructions = _instructions(data.get("instructions"))
    if assignment is not None and assignment.instructions == instructions:
        instructions_html = assignment.instructions_html
    else:
        (instructions_html,) = render_bounded([instructions])
    fields_ = {
        "title": title, "instructions": instructions, "instructions_html": instructions_html, "runtime": runtime,
        "environment": environment, "starter_code": _text(data.get("starter_code"), "starter_code"), "limits": limits,
        "egress": egress,
        "opens_at": opens_at,
        "due_at": due_at, "attempts_allowed": int(data.get("attempts_allowed") or 0),
        "accept_late": bool(data.get("accept_late")),
    }  # fmt: skip
    if data.get("publish"):  # the service's callers (tests, imports) may publish at once
        fields_["published_at"] = (assignment and assignment.published_at) or timezone.now()
    with transaction.atomic():
        if assignment is None:
            assignment = Assignment.objects.create(course=course, **fields_)
        else:
            before = _tests_signature(list(assignment.tests.all()))
            moved = assignment.environment != environment  # the same tests, other packages: graded again
            for name, value in fields_.items():
                setattr(assignment, name, value)
            if before != [_signature(t) for t in tests] or moved:
                assignment.tests_version += 1
            assignment.save()
            assignment.tests.all().delete()
        assignment.datasets.set(datasets)
        AssignmentTest.objects.bulk_create(
            [AssignmentTest(assignment=assignment, position=index, **test) for index, test in enumerate(tests)]
        )
    return assignment


def _clean_test(test: dict[str, Any], index: int, runtime: str, course: Course) -> dict[str, Any]:
    where = f"tests.{index}"
    name = str(test.get("name") or "").strip()
    if not name or len(name) > 200:
        raise ServiceError("invalid_test", f"{where}.name: 1 to 200 characters", field=f"{where}.name", status=422)
    points = test.get("points", 1)
    if isinstance(points, bool) or not isinstance(points, int | float) or not 0 <= points <= 1000:
        raise ServiceError(
            "invalid_test", f"{where}.points must be a number from 0 to 1000", field=f"{where}.points", status=422
        )
    visibility = test.get("visibility") or Visibility.VISIBLE
    if visibility not in Visibility.values:
        raise ServiceError(
            "invalid_test", f"{where}.visibility must be one of {', '.join(Visibility.values)}",
            field=f"{where}.visibility", status=422,
        )  # fmt: skip
    args = test.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ServiceError("invalid_test", f"{where}.args must be a list of strings", field=f"{where}.args", status=422)
    check_program_input(str(test.get("stdin") or ""), args, where=f"{where}.", code="invalid_test")
    expected, check_code = test.get("expected_stdout"), test.get("check_code") or ""
    if (expected is None) == (not check_code):
        raise ServiceError(
            "invalid_test", f"{where}: give either expected_stdout or check_code (exactly one)",
            field=f"{where}.expected_stdout", status=422,
        )  # fmt: skip
    match = test.get("match") or Match.STRIP
    if match not in Match.values:
        raise ServiceError(
            "invalid_test", f"{where}.match must be one of {', '.join(Match.values)}", field=f"{where}.match",
            status=422,
        )  # fmt: skip
    if expected is not None and match == Match.REGEX:
        # Compiled here, in the request: the pattern is capped first, and RE2 compiles in time and
        # memory bounded by that cap and its RE2_MAX_MEM (no recursion, no backtracking).
        problem = matching.pattern_error(str(expected))
        if problem is not None:
            raise ServiceError(
                "invalid_test", f"{where}.expected_stdout (test {name[:80]!r}): {problem}",
                field=f"{where}.expected_stdout", status=422,
            )  # fmt: skip
    check_runtime = test.get("check_runtime") or ""
    if check_code and check_runtime and check_runtime not in RUNTIMES:
        raise ServiceError(
            "invalid_test", f"{where}.check_runtime must be one of {', '.join(RUNTIMES)}",
            field=f"{where}.check_runtime", status=422,
        )  # fmt: skip
    return {
        "name": name, "points": float(points), "visibility": visibility,
        "stdin": _text(test.get("stdin"), f"{where}.stdin"), "args": args,
        "expected_stdout": None if expected is None else _text(expected, f"{where}.expected_stdout"),
        "match": match, "check_code": _text(check_code, f"{where}.check_code"),
        "check_runtime": check_runtime if check_code else "",
    }  # fmt: skip


def _instructions(value: Any) -> str:
    text = str(value or "")
    size = len(text.encode())
    if size > MARKDOWN_MAX_BYTES:
        raise ServiceError(
            "markdown_too_large", f"instructions: at most {size_words(MARKDOWN_MAX_BYTES)} of markdown (these are "
            f"{size_words(size, exact=True)})", field="instructions", status=422,
        )  # fmt: skip
    return text


def _text(value: Any, field: str) -> str:
    text = str(value or "")
    if len(text.encode()) > MAX_TEST_TEXT or "\0" in text:
        raise ServiceError(
            "invalid_text", f"{field}: at most {size_words(MAX_TEST_TEXT)}, no NUL", field=field, status=422
        )
    return text


_SIGNED = ("name", "points", "visibility", "stdin", "args", "expected_stdout", "match", "check_code", "check_runtime")


def _signature(test: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(test[name] for name in _SIGNED)


def _tests_signature(tests: list[AssignmentTest]) -> list[tuple[Any, ...]]:
    return [tuple(getattr(t, name) for name in _SIGNED) for t in tests]


def assignment_delete(*, assignment: Assignment) -> None:
    assignment.delete()


# --- drafts and publishing ------------------------------------------------------------------


def publication(assignment: Assignment) -> dict[str, Any]:
    """What students will see once the assignment is published: the confirmation's list."""
    tests = list(assignment.tests.all())
    shown = [t for t in tests if t.visibility == Visibility.VISIBLE]
    after_due = [t for t in tests if t.visibility == Visibility.AFTER_DUE]
    hidden = [t for t in tests if t.visibility == Visibility.HIDDEN]
    opens = assignment.opens_at
    return {
        "published": assignment.published_at is not None, "published_at": assignment.published_at,
        "title": assignment.title, "runtime": assignment.runtime, "opens_at": opens, "due_at": assignment.due_at,
        "visible_now": opens is None or opens <= timezone.now(),
        "instructions_bytes": len(assignment.instructions.encode()),
        "starter_code_lines": len(assignment.starter_code.splitlines()),
        "datasets": [d.name for d in assignment.datasets.all()],
        "attempts_allowed": assignment.attempts_allowed, "accept_late": assignment.accept_late,
        "max_score": sum(t.points for t in tests),
        "tests_with_details": [t.name for t in shown],
        "tests_after_due": [t.name for t in after_due],
        "tests_name_and_points_only": [t.name for t in hidden],
    }  # fmt: skip


def assignment_publish(*, assignment: Assignment, by: User, confirm: bool) -> Assignment:
    """Make a draft visible to the course's students (at its open time). `confirm` says the caller
    was shown `publication` first; without it nothing changes."""
    if not confirm:
        raise ServiceError(
            "confirmation_needed", "publishing needs confirm: true, after reading what students will see "
            "(GET .../publication)", field="confirm", status=422,
        )  # fmt: skip
    if assignment.published_at is None:
        Assignment.objects.filter(id=assignment.id, published_at=None).update(
            published_at=timezone.now(), published_by=by
        )
        assignment.refresh_from_db(fields=["published_at", "published_by"])
    return assignment


def assignment_unpublish(*, assignment: Assignment) -> Assignment:
    """Back to a draft, while no student has submitted to it (their work would vanish from them)."""
    with transaction.atomic():
        students = Membership.objects.filter(course=assignment.course_id, role=Role.STUDENT).values("user_id")
        if assignment.submissions.filter(student__in=students).exists():
            raise ServiceError(
                "has_submissions", "students have submitted to this assignment: it stays published", status=409
            )
        Assignment.objects.filter(id=assignment.id).update(published_at=None, published_by=None)
    assignment.refresh_from_db(fields=["published_at", "published_by"])
    return assignment


# --- extensions -----------------------------------------------------------------------------


def extension_set(*, assignment: Assignment, student: User, due_at: datetime, reason: str, by: User) -> Extension:
    """One student's own due time for the assignment (replacing any earlier extension of theirs)."""
    if not Membership.objects.filter(course=assignment.course_id, user=student, role=Role.STUDENT).exists():
        raise ServiceError("not_a_student", "extensions are for the course's students", field="student", status=404)
    if assignment.opens_at and due_at <= assignment.opens_at:
        raise ServiceError("invalid_dates", "the extension must end after the assignment opens", field="due_at",
                           status=422)  # fmt: skip
    extension, _ = Extension.objects.update_or_create(
        assignment=assignment, student=student, defaults={"due_at": due_at, "reason": reason[:300], "granted_by": by}
    )
    return extension


def extension_remove(*, assignment: Assignment, student: User) -> None:
    Extension.objects.filter(assignment=assignment, student=student).delete()


def parse_when(value: Any) -> datetime | None:
    """An aware datetime from the API's ISO text (naive ones are in the server's zone)."""
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(str(value))
        except ValueError:
            raise ServiceError("invalid_date", f"{value!r} is not an ISO date and time", status=422) from None
    return when if timezone.is_aware(when) else timezone.make_aware(when)
