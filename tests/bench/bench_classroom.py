"""Classrooms under load through the real stack (web, Celery worker, namespace engine): a deadline
burst of 120 students submitting once within 10 s, and one student flooding 50 submissions among others.

Timings are read from the stack's database once grading has drained: submit->graded is a
submission's graded_at - created_at, a student's wait for grading is their first grading run's
created_at (the moment the queue handed it a slot) - their submission's created_at. Those rows
are kept in <data dir>/bench/classroom-raw.json, for looking into a surprising figure."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import Any

from runner.config import paths_from_env
from tests.bench import Row, p50, percentile, targeted
from tests.bench.bench_web import Stack

STUDENTS = 120
OTHERS = 30  # students submitting once beside the flooder: fewer than 120 keeps the bench short
FLOOD = 50  # the flooder's submissions
WINDOW_S = 10.0  # every submission is sent within this window, at seeded random moments
CLIENTS = 6  # threads sending them, as many students' browsers would
# The grading worker's pool and the grading slots alike, as the settings advise. 4, not 2, on this 2-core
# host: it is the settings' default; a pilot drained the burst as fast with either (15.2 and 15.4
# runs/s on a quiet host: the runs are CPU-bound); and more slots are the harder case for fairness
# (more grading runs handed out at once), while a lone student's three tests still run together.
CONCURRENCY = 4
DRAIN_TIMEOUT_S = 180.0
POLL_S = 0.5
SEED = 20261201
CODE = "print(int(input())*2)"
TESTS = [{"name": f"doubles {n}", "stdin": f"{n}\n", "expected_stdout": f"{2 * n}\n"} for n in (3, 21, -7)]
FLOODER = f"student{STUDENTS:03d}"  # the 121st user; the others are student000..student029

# manage.py shell snippets (the stack's own database through its env); each prints one JSON line.
USERS = """
import json
from django.contrib.auth.models import User
from playground.services.accounts import token_create
tokens = {{}}
for i in range({count}):
    user = User.objects.create_user(f"student{{i:03d}}")
    tokens[user.username] = token_create(user=user, name="bench")
print(json.dumps(tokens))
"""
SNAPSHOT = """
import json
from playground.models import Run, Submission
def at(t):
    return None if t is None else t.timestamp()
subs = Submission.objects.filter(assignment_id="{assignment}").select_related("student")
runs = Run.objects.filter(course_id="{course}", kind__in=("test", "check")).select_related("owner")
print(json.dumps({{
    "submissions": [[s.student.username, s.state, at(s.created_at), at(s.graded_at)] for s in subs],
    "runs": [[r.owner.username, at(r.created_at), at(r.started_at), at(r.finished_at), r.outcome] for r in runs],
}}))
"""


@dataclass(frozen=True)
class Submitted:
    """One submission as the database has it, times in epoch seconds."""

    student: str
    state: str
    created_s: float
    graded_s: float | None

    @property
    def wait_s(self) -> float | None:
        return None if self.graded_s is None else self.graded_s - self.created_s


@dataclass(frozen=True)
class GradingRun:
    """A test (or check) run: created when the queue handed it a slot, started by the worker."""

    student: str
    created_s: float
    started_s: float | None
    finished_s: float | None
    outcome: str | None


@dataclass(frozen=True)
class Sent:
    """What the sending threads saw: accepted submissions, refusals, POST round trips."""

    accepted: int
    errors: list[str]
    post_s: list[float]


@dataclass(frozen=True)
class Assignment:
    title: str
    course_id: str
    assignment_id: str


def api_call(port: int, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One API call to the stack on `port` as the token's user; its JSON answer, or RuntimeError."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - our own http URL
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{method} {path}: {exc.code} {exc.read()[:300]!r}") from exc


class Classroom:
    """The stack's user `bench` as instructor, and students with API tokens of their own."""

    def __init__(self, stack: Stack, count: int) -> None:
        self.stack = stack
        self.raw: dict[str, Any] = {}  # each part's snapshot as the database gave it
        self.tokens: dict[str, str] = json.loads(_last_line(stack._manage("shell", "-c", USERS.format(count=count))))

    def api(self, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return api_call(self.stack.port, token, method, path, body)

    def assignment(self, title: str, students: list[str]) -> Assignment:
        """A course whose `students` joined by its code, with one python assignment of three tests."""
        course = self.api(self.stack.token, "POST", "/api/courses", {"title": title})
        for student in students:
            self.api(self.tokens[student], "POST", "/api/courses/join", {"join_code": course["join_code"]})
        assignment = self.api(self.stack.token, "POST", f"/api/courses/{course['id']}/assignments", {
            "title": "double it", "runtime": "python", "tests": TESTS, "publish": True,
        })  # fmt: skip
        return Assignment(title, course["id"], assignment["id"])

    def submit(self, assignment: Assignment, schedule: list[tuple[float, str]]) -> Sent:
        """Each (offset_s, student) submits CODE at its moment from the start, from CLIENTS threads."""
        pending = sorted(schedule, reverse=True)
        lock = threading.Lock()
        errors: list[str] = []
        post_s: list[float] = []
        start = time.monotonic()

        def client() -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    offset, student = pending.pop()
                time.sleep(max(0.0, start + offset - time.monotonic()))
                sent = time.monotonic()
                try:
                    self.api(self.tokens[student], "POST", f"/api/assignments/{assignment.assignment_id}/submissions",
                             {"code": CODE})  # fmt: skip
                except (OSError, RuntimeError) as exc:
                    with lock:
                        errors.append(f"{student}: {exc}")
                    continue
                with lock:
                    post_s.append(time.monotonic() - sent)

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return Sent(len(post_s), errors, post_s)

    def drain(self, assignment: Assignment, expected: int) -> bool:
        """Poll the staff's submission list until every submission is out of queued/grading."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        path = f"/api/assignments/{assignment.assignment_id}/submissions"
        while time.monotonic() < deadline:
            states = [s["state"] for s in self.api(self.stack.token, "GET", path)]
            if len(states) >= expected and not any(s in ("queued", "grading") for s in states):
                return True
            time.sleep(POLL_S)
        return False

    def snapshot(self, assignment: Assignment) -> tuple[list[Submitted], list[GradingRun]]:
        snippet = SNAPSHOT.format(assignment=assignment.assignment_id, course=assignment.course_id)
        found = json.loads(_last_line(self.stack._manage("shell", "-c", snippet)))
        self.raw[assignment.title] = found
        return [Submitted(*s) for s in found["submissions"]], [GradingRun(*r) for r in found["runs"]]


def _keep_raw(raw: dict[str, Any]) -> None:
    out = paths_from_env().data_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "classroom-raw.json").write_text(json.dumps(raw) + "\n")


def _last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def _moments(rng: random.Random, students: list[str]) -> list[tuple[float, str]]:
    return [(rng.uniform(0.0, WINDOW_S), student) for student in students]


def _firsts(subs: list[Submitted], runs: list[GradingRun]) -> list[tuple[float, float]]:
    """Per student who was served: (their first submission's creation, their first grading run's)."""
    first_sub: dict[str, float] = {}
    for sub in subs:
        first_sub[sub.student] = min(sub.created_s, first_sub.get(sub.student, sub.created_s))
    first_run: dict[str, float] = {}
    for run in runs:
        first_run[run.student] = min(run.created_s, first_run.get(run.student, run.created_s))
    return [(first_sub[s], first_run[s]) for s in first_sub if s in first_run]


def overtaken_s(firsts: list[tuple[float, float]]) -> float:
    """The longest a student's first grading run came after that of a student who submitted later:
    near 0 when never-served students are served in the order they submitted."""
    worst = 0.0
    for submitted, served in firsts:
        later = [other for sub, other in firsts if sub > submitted and other < served]
        worst = max([worst, *(served - other for other in later)])
    return worst


def flooder_runs_between(subs: list[Submitted], runs: list[GradingRun], flooder: str) -> tuple[int, int, int]:
    """For each other student's grading runs in order, the flooder's grading runs created after that
    student's previous grading run (or their submission) and before this one. Returns the most in
    one gap, the gaps with exactly one, and the gaps looked at."""
    flood = sorted(r.created_s for r in runs if r.student == flooder)
    worst = ones = gaps = 0
    for student in {s.student for s in subs} - {flooder}:
        mark = min(s.created_s for s in subs if s.student == student)
        for created in sorted(r.created_s for r in runs if r.student == student):
            between = bisect_left(flood, created) - bisect_right(flood, mark)
            worst, ones, gaps = max(worst, between), ones + (between == 1), gaps + 1
            mark = created
    return worst, ones, gaps


@dataclass(frozen=True)
class Summary:
    """One part's figures, read from the database after the drain."""

    graded: int
    not_graded: int
    other: int  # still queued or grading when the drain gave up
    waits_s: list[float]  # graded_at - created_at, graded submissions
    first_run_s: list[float]  # per student, first grading run created - first submission created
    overtaken_s: float  # see overtaken_s()
    graded_in_window: int  # graded before the last submission was created
    drain_s: float | None  # first submission created -> last graded
    runs: int
    runs_unsucceeded: int  # grading runs whose outcome was not `succeeded` (each one is retried)

    @classmethod
    def of(cls, subs: list[Submitted], runs: list[GradingRun], students: set[str] | None = None) -> Summary:
        """The figures for `students` (everyone when None)."""
        subs = [s for s in subs if students is None or s.student in students]
        runs = [r for r in runs if students is None or r.student in students]
        firsts = _firsts(subs, runs)
        ends = [s.graded_s for s in subs if s.graded_s is not None]
        last_sent = max((s.created_s for s in subs), default=0.0)
        return cls(
            graded=sum(s.state == "graded" for s in subs), not_graded=sum(s.state == "not_graded" for s in subs),
            other=sum(s.state not in ("graded", "not_graded") for s in subs),
            waits_s=[s.wait_s for s in subs if s.state == "graded" and s.wait_s is not None],
            first_run_s=[run - sub for sub, run in firsts], overtaken_s=overtaken_s(firsts),
            graded_in_window=sum(end <= last_sent for end in ends),
            drain_s=max(ends) - min(s.created_s for s in subs) if ends else None, runs=len(runs),
            runs_unsucceeded=sum(r.outcome != "succeeded" for r in runs),
        )  # fmt: skip


def _p95(values: list[float]) -> float:
    return percentile(values, 0.95)


def _stat(metric: str, values: list[float], pick: Any, *, scale: float = 1.0, unit: str = "s") -> Row:
    return Row("classroom", metric, pick(values) * scale if values else None, unit)


def burst_rows(what: str, sent: Sent, part: Summary) -> list[Row]:
    return [
        targeted("classroom", f"{what}: submissions graded", part.graded, "subs", at_least=STUDENTS),
        Row("classroom", f"{what}: not graded", part.not_graded, "subs"),
        Row("classroom", f"{what}: other (queued/grading at the drain's timeout)", part.other, "subs"),
        Row("classroom", f"{what}: POST refused or failed", len(sent.errors), "subs"),
        _stat(f"{what}: submit->graded p50 (db graded_at - created_at)", part.waits_s, p50),
        _stat(f"{what}: submit->graded p95", part.waits_s, _p95),
        _stat(f"{what}: submit->graded, fastest student", part.waits_s, min),
        _stat(f"{what}: submit->graded, slowest student", part.waits_s, max),
        _stat(f"{what}: first grading run created after submit, fastest-served", part.first_run_s, min),
        _stat(f"{what}: first grading run created after submit, slowest-served", part.first_run_s, max),
        Row("classroom", f"{what}: first grading run, longest behind a later submitter", part.overtaken_s, "s"),
        Row("classroom", f"{what}: graded before the last submission arrived", part.graded_in_window, "subs"),
        Row("classroom", f"{what}: drain, first submission created -> last graded", part.drain_s, "s"),
        Row("classroom", f"{what}: grading runs that did not succeed, of {part.runs}", part.runs_unsucceeded, "runs"),
        Row("classroom", f"{what}: grading runs per second over the drain",
            part.runs / part.drain_s if part.drain_s else None, "runs/s"),
        _stat(f"{what}: POST submit round trip p95", sent.post_s, _p95, scale=1000, unit="ms"),
    ]  # fmt: skip


def flood_rows(
    what: str, sent: Sent, flood: list[Submitted], runs: list[GradingRun], alone: Summary, alone_sent: Sent
) -> list[Row]:  # fmt: skip
    everyone, others = Summary.of(flood, runs), Summary.of(flood, runs, {s.student for s in flood} - {FLOODER})
    flooder = Summary.of(flood, runs, {FLOODER})
    worst, ones, gaps = flooder_runs_between(flood, runs, FLOODER)
    return [
        targeted("classroom", f"{what}: submissions graded", everyone.graded, "subs", at_least=FLOOD + OTHERS),
        Row("classroom", f"{what}: not graded / other state / POST refused",
            everyone.not_graded + everyone.other + len(sent.errors), "subs"),
        Row("classroom", f"{what}: same others alone: submissions graded", alone.graded, "subs"),
        Row("classroom", f"{what}: same others alone: not graded / other state / POST refused",
            alone.not_graded + alone.other + len(alone_sent.errors), "subs"),
        targeted("classroom", f"{what}: max flooder grading runs between another student's consecutive runs "
                 "(or since their submission)", worst, "runs", at_most=1),
        Row("classroom", f"{what}: of those {gaps} gaps, ones with exactly 1 flooder run", ones, "gaps"),
        _stat(f"{what}: others' submit->graded p50, flooder present", others.waits_s, p50),
        _stat(f"{what}: others' submit->graded p50, same others alone", alone.waits_s, p50),
        _stat(f"{what}: others' submit->graded p95, flooder present", others.waits_s, _p95),
        _stat(f"{what}: others' submit->graded p95, same others alone", alone.waits_s, _p95),
        _stat(f"{what}: others' submit->graded slowest, flooder present", others.waits_s, max),
        _stat(f"{what}: others' submit->graded slowest, same others alone", alone.waits_s, max),
        Row("classroom", f"{what}: others, first submitted -> last graded", others.drain_s, "s"),
        Row("classroom", f"{what}: flooder, first submitted -> last graded", flooder.drain_s, "s"),
        _stat(f"{what}: flooder's submit->graded p50", flooder.waits_s, p50),
    ]  # fmt: skip


def run() -> list[Row]:
    rng = random.Random(SEED)  # noqa: S311 - moments to submit at, not secrets
    students = [f"student{i:03d}" for i in range(STUDENTS)]
    others = students[:OTHERS]
    # The flooder's fifty submissions would meet the rate limit at the door (6 a minute): what is
    # measured here is the grading queue's fairness behind it, so the door is opened wide.
    env = {"CORDON_GRADING_SLOTS": str(CONCURRENCY), "CORDON_SUBMISSIONS_PER_MINUTE_STUDENT": "1000"}
    stack = Stack(env=env, concurrency=CONCURRENCY, grading_concurrency=CONCURRENCY)
    room = None
    try:
        stack.one_run()  # warm-up: image verification, imports
        room = Classroom(stack, STUDENTS + 1)
        burst = room.assignment("deadline burst", students)
        alone = room.assignment("others alone", others)
        flooded = room.assignment("one student floods", [*others, FLOODER])

        burst_sent = room.submit(burst, _moments(rng, students))
        burst_drained = room.drain(burst, burst_sent.accepted)
        burst_part = Summary.of(*room.snapshot(burst))

        others_moments = _moments(rng, others)
        alone_sent = room.submit(alone, others_moments)
        room.drain(alone, alone_sent.accepted)
        alone_part = Summary.of(*room.snapshot(alone))

        flood_moments = others_moments + _moments(rng, [FLOODER] * FLOOD)
        flood_sent = room.submit(flooded, flood_moments)
        room.drain(flooded, flood_sent.accepted)
        flood_subs, flood_runs = room.snapshot(flooded)
    finally:
        stack.close()
        if room is not None:
            _keep_raw(room.raw)
    if not burst_drained:
        burst_part = replace(burst_part, drain_s=None)  # it never drained: no drain time
    return [
        *burst_rows(f"deadline burst ({STUDENTS} students x 1 in {WINDOW_S:.0f} s, 3 tests)", burst_sent, burst_part),
        *flood_rows(f"flood (1 student x {FLOOD} + {OTHERS} others x 1 in {WINDOW_S:.0f} s)", flood_sent,
                    flood_subs, flood_runs, alone_part, alone_sent),
    ]  # fmt: skip


STARTS = """
import json
from collections import Counter
from playground.models import Run
runs = Run.objects.filter(kind__in=("test", "check"))
print(json.dumps({"starts": Counter(r.sandbox_start or "none" for r in runs),
                  "total_s": sorted(r.timings.get("total_s", 0) for r in runs),
                  "start_s": sorted(r.timings.get("start_s", 0) for r in runs)}))
"""


def burst_p95(*, ready: bool) -> tuple[float | None, dict[str, Any]]:
    """The deadline burst alone, on a stack with ready sandboxes on or off: submit->graded p95 (s),
    and how its grading runs' sandboxes started, with their supervised times (s)."""
    env = {"CORDON_GRADING_SLOTS": str(CONCURRENCY), "CORDON_READY": "true" if ready else "false"}
    stack = Stack(env=env, concurrency=CONCURRENCY, grading_concurrency=CONCURRENCY)
    try:
        stack.one_run()
        students = [f"student{i:03d}" for i in range(STUDENTS)]
        room = Classroom(stack, STUDENTS)
        burst = room.assignment("deadline burst", students)
        sent = room.submit(burst, _moments(random.Random(SEED), students))  # noqa: S311 - moments, not secrets
        room.drain(burst, sent.accepted)
        part = Summary.of(*room.snapshot(burst))
        starts: dict[str, Any] = json.loads(stack._manage("shell", "-c", STARTS).strip().splitlines()[-1])
    finally:
        stack.close()
    return (_p95(part.waits_s) if part.waits_s and part.graded == STUDENTS else None), starts
