"""The staff's tools in a real browser: an extension given, a rubric saved and used to adjust a
score (the student sees the points and the comment), a similarity report made by the worker and a
copied pair shown side by side, the gradebook's way to every attempt of a student, and a late
submission that spends a late day and says so. Screenshots at 1280 and 390 px, and no page scrolls
sideways on a phone."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from playground.classroom import courses as course_services
from playground.models import Membership, Role, Submission, SubmissionState
from tests.playground.classroom.test_browser_courses import _expect_ready
from tests.playground.test_browser import (  # noqa: F401 - chromium, shots and site are fixtures
    BROWSER_MARKS,
    PASSWORD,
    Browser,
    chromium,
    expect_fits_a_phone,
    shots,
    site,
)

pytestmark = BROWSER_MARKS

REPORT_MS = 120_000  # the report is made by the worker's grading queue, in bounded children

STARTER = "# read the numbers, one a line\n"
ORIGINAL = """# read the numbers, one a line
def read_numbers(stream):
    numbers = []
    for line in stream:
        line = line.strip()
        if line:
            numbers.append(int(line))
    return numbers


def running_totals(values):
    totals, acc = [], 0
    for value in values:
        acc += value
        totals.append(acc)
    return totals


import sys
for total in running_totals(read_numbers(sys.stdin)):
    print(total)
"""
COPY = """# read the numbers, one a line
import sys


def sums_so_far(xs):
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


def grab(src):
    got = []
    for ln in src:
        ln = ln.strip()
        if ln:
            got.append(int(ln))
    return got


for t in sums_so_far(grab(sys.stdin)):
    print(t)
"""
OWN = """# read the numbers, one a line
import itertools, sys
print("\\n".join(str(n) for n in itertools.accumulate(int(v) for v in sys.stdin.read().split())))
"""


@pytest.fixture
def course(transactional_db: None) -> dict[str, Any]:
    """Made before the browser starts (the ORM refuses to run inside Playwright's event loop)."""
    ines = User.objects.create_user("ines", password=PASSWORD)
    made = course_services.course_create(user=ines, title="Data 201")  # its late days: set through its page
    assignment = course_services.assignment_save(course=made, data={
        "title": "Running totals", "runtime": "python", "starter_code": STARTER, "publish": True,
        "due_at": timezone.now() - timedelta(hours=2),
        "tests": [{"name": "three", "stdin": "1\n2\n3\n", "expected_stdout": "1\n3\n6\n", "points": 4}],
    })  # fmt: skip
    ids = {}
    for name, code in (("stu", ORIGINAL), ("sue", COPY), ("sam", OWN)):
        user = User.objects.create_user(name, password=PASSWORD)
        Membership.objects.create(course=made, user=user, role=Role.STUDENT)
        submission = Submission.objects.create(
            assignment=assignment, student=user, code=code, state=SubmissionState.GRADED, score=4.0, max_score=4.0,
            charged=True, graded_at=timezone.now(),
        )  # fmt: skip
        ids[name] = str(submission.id)
    return {"course": str(made.id), "assignment": str(assignment.id), "submissions": ids}


def test_the_staff_adjust_a_score_give_an_extension_and_find_a_copied_pair(
    course: dict[str, Any],
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    ines = chromium.logged_in("ines")
    # The course's late days, through its policy form: saved, and read back after a reload.
    # Until the page's script has read the policy (held back here), Save is off and the fields say the saved figures.
    held = []
    ines.route("**/api/limits", lambda route: held.append(route))
    ines.goto(f"{site}/courses/{course['course']}/", wait_until="domcontentloaded")
    expect(ines.locator("#policy-save")).to_be_disabled()
    expect(ines.locator("#policy-late-days")).to_have_value("0")
    expect(ines.locator("#policy-status")).to_have_text("loading the policy…")
    ines.wait_for_timeout(300)
    assert held, "the page did not ask for the limits"
    held[0].continue_()
    ines.unroute("**/api/limits")
    _expect_ready(ines, "#course")
    expect(ines.locator("#policy-save")).to_be_enabled()
    ines.fill("#policy-late-days", "3")
    ines.fill("#policy-late-days-each", "2")
    ines.get_by_role("button", name="Save policy").click()
    expect(ines.locator("#policy-status")).to_have_text("saved")
    expect(ines.locator("#message")).to_have_text(
        "Course policy saved: 3 late days per student, at most 2 on one assignment."
    )
    ines.reload()
    _expect_ready(ines, "#course")
    expect(ines.locator("#policy-late-days")).to_have_value("3")
    expect(ines.locator("#policy-late-days-each")).to_have_value("2")
    ines.goto(f"{site}/assignments/{course['assignment']}/")
    _expect_ready(ines, "#staff-panel")
    expect(ines.locator("#publishing")).to_contain_text("Published")

    # A rubric of reusable adjustments, and an extension for one student.
    ines.fill("#rubric", "-1 no comments\n+0.5 tidy names")
    ines.get_by_role("button", name="Save rubric").click()
    expect(ines.locator("#staff-message")).to_have_text("Rubric saved: 2 items.")
    ines.fill("#extension-student", "sam")
    ines.fill("#extension-due", (timezone.localtime() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"))
    ines.fill("#extension-reason", "ill")
    ines.get_by_role("button", name="Give extension").click()
    expect(ines.locator('#extensions li[data-student="sam"]')).to_contain_text("(ill)")
    _the_similarity_report_finds_the_copy(course, ines, shots, site)
    _the_grid_opens_every_attempt_and_the_student_sees_the_adjustment(chromium, course, ines, shots, site)


def _the_similarity_report_finds_the_copy(course: Any, ines: Any, shots_dir: Any, base: Any) -> None:
    from playwright.sync_api import expect

    # The similarity report: made in the background, the copy found, the honest one not.
    ines.get_by_role("button", name="Check similarity").click()
    report = ines.locator("#similarity")
    expect(report.locator("p[data-state=done]")).to_be_visible(timeout=REPORT_MS)
    pairs = report.locator("ol.pairs li")
    expect(pairs).to_have_count(1)
    expect(pairs.first).to_contain_text(re.compile(r"(stu and sue|sue and stu)"))
    ines.screenshot(path=shots_dir / "assignment-staff-1280.png", full_page=True)
    expect_fits_a_phone(ines, shots_dir / "assignment-staff-390.png")
    pairs.first.get_by_role("link").click()
    _expect_ready(ines, "#similarity-pair")
    expect(ines.locator("#side-a mark").first).to_be_visible()
    expect(ines.locator("#side-b mark").first).to_be_visible()
    marked = ines.locator("#side-a mark").all_inner_texts() + ines.locator("#side-b mark").all_inner_texts()
    assert any("append" in text for text in marked), marked
    ines.screenshot(path=shots_dir / "similarity-pair-1280.png", full_page=True)
    expect_fits_a_phone(ines, shots_dir / "similarity-pair-390.png")

    # An adjustment from the rubric on stu's submission; stu sees the points and the comment.
    ines.goto(f"{base}/submissions/{course['submissions']['stu']}/")
    _expect_ready(ines, "#submission")
    ines.locator("#adjust-rubric").select_option(label="-1: no comments")
    ines.get_by_role("button", name="Adjust").click()
    expect(ines.locator("#result .adjustments li")).to_contain_text("no comments")
    expect(ines.locator("#result .score")).to_have_text("3/4")
    ines.screenshot(path=shots_dir / "submission-adjusted-1280.png", full_page=True)
    expect_fits_a_phone(ines, shots_dir / "submission-adjusted-390.png")


def _the_grid_opens_every_attempt_and_the_student_sees_the_adjustment(
    browser: Any, course: Any, ines: Any, shots_dir: Any, base: Any
) -> None:
    from playwright.sync_api import expect

    # The grid's attempts link opens every attempt of the student.
    ines.goto(f"{base}/courses/{course['course']}/")
    _expect_ready(ines, "#course")
    cell = ines.locator('#gradebook tr[data-student="stu"] td.cell').first
    expect(cell).to_contain_text("3/4")
    expect(cell).to_contain_text("\N{MINUS SIGN}1 by hand")
    cell.get_by_role("link", name="1 attempt").click()
    _expect_ready(ines, "#student-record")
    expect(ines.locator("table.attempts tbody tr")).to_have_count(1)
    expect(ines.locator("table.attempts")).to_contain_text("3/4")
    ines.screenshot(path=shots_dir / "student-record-1280.png", full_page=True)
    expect_fits_a_phone(ines, shots_dir / "student-record-390.png")

    # The student: the adjusted score with its comment, and a late submission that spends a late day.
    stu = browser.logged_in("stu")
    stu.goto(f"{base}/submissions/{course['submissions']['stu']}/")
    _expect_ready(stu, "#submission")
    expect(stu.locator("#result .score")).to_have_text("3/4")
    expect(stu.locator("#result .adjustments")).to_contain_text("no comments")
    expect(stu.locator("#adjust-form")).to_have_count(0)
    stu.goto(f"{base}/assignments/{course['assignment']}/")
    _expect_ready(stu, "#assignment")
    expect(stu.locator("#facts")).to_contain_text("0 late days used, 3 left")
    expect(stu.locator("#submit-note")).to_contain_text("spends late days")
    stu.get_by_role("button", name="Submit").click()
    expect(stu.locator("#current .late-days")).to_have_text("1 late day spent", timeout=30_000)
    stu.reload()
    _expect_ready(stu, "#assignment")
    expect(stu.locator("#facts")).to_contain_text("1 late day used, 2 left")
    stu.screenshot(path=shots_dir / "assignment-late-day-1280.png", full_page=True)
    expect_fits_a_phone(stu, shots_dir / "assignment-late-day-390.png")


TRACEBACK = b'Traceback (most recent call last):\n  File "/tmp/main.py", line 3, in <module>\n    print(1 // n)\n' \
            b"ZeroDivisionError: integer division or modulo by zero\n"  # fmt: skip


@pytest.fixture
def crashed(transactional_db: None) -> dict[str, str]:
    """A student's submission whose program crashed on a visible test and on a hidden one, as the
    grader leaves it (its test runs finished, their logs stored)."""
    from playground.models import RunKind, TestResult
    from tests.playground.classroom.course_world import finished_run
    from tests.playground.factories import stored_logs

    ines = User.objects.create_user("ines", password=PASSWORD)
    made = course_services.course_create(user=ines, title="Data 201")
    tests = [{"name": "zero", "stdin": "0\n", "expected_stdout": "1"},
             {"name": "secret zero", "visibility": "hidden", "stdin": "0\n", "expected_stdout": "1"}]  # fmt: skip
    assignment = course_services.assignment_save(course=made, data={
        "title": "Reciprocal", "runtime": "python", "publish": True, "tests": tests,
    })  # fmt: skip
    stu = User.objects.create_user("stu", password=PASSWORD)
    Membership.objects.create(course=made, user=stu, role=Role.STUDENT)
    submission = Submission.objects.create(assignment=assignment, student=stu, code="n = int(input())\nprint(1 // n)",
                                           state=SubmissionState.GRADED, score=0.0, max_score=2.0, charged=True,
                                           graded_at=timezone.now())  # fmt: skip
    for position, (test, stderr) in enumerate(zip(tests, [TRACEBACK, b"SECRET-ERR: the hidden one\n"], strict=True)):
        run = finished_run(owner=stu, course=made, kind=RunKind.TEST, code=submission.code, stdin="0\n",
                           outcome="failed", exit_code=1, stdout_bytes=6, stderr_bytes=len(stderr))  # fmt: skip
        stored_logs(run.id, stdout=b"start\n", stderr=stderr)
        TestResult.objects.create(
            submission=submission, position=position, name=test["name"], points=1, visibility=test.get("visibility",
            "visible"), spec={"stdin": "0\n", "expected_stdout": "1", "match": "strip"}, status="failed", run=run,
            outcome="failed", exit_code=1, score=0.0, detail="failed: the program exited with an error (exit status 1)",
        )  # fmt: skip
    return {"submission": str(submission.id)}


def test_a_student_sees_their_traceback_under_a_visible_test_and_the_staff_see_every_tests_streams(
    crashed: dict[str, str],
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    stu = chromium.logged_in("stu")
    stu.goto(f"{site}/submissions/{crashed['submission']}/")
    _expect_ready(stu, "#submission")
    visible = stu.locator("li.test-result", has_text="zero").first
    expect(visible.locator("pre.stderr-tail")).to_contain_text("ZeroDivisionError: integer division or modulo by zero")
    hidden = stu.locator("li.test-result", has_text="secret zero")
    expect(hidden.locator("pre.stderr-tail")).to_have_count(0)
    assert "SECRET-ERR" not in stu.content()
    expect(stu.locator(".test-streams")).to_have_count(0)  # the staff's alone
    stu.screenshot(path=shots / "submission-traceback-1280.png", full_page=True)
    expect_fits_a_phone(stu, shots / "submission-traceback-390.png")

    ines = chromium.logged_in("ines")
    ines.goto(f"{site}/submissions/{crashed['submission']}/")
    _expect_ready(ines, "#submission")
    streams = ines.locator("li.test-result", has_text="secret zero").locator(".test-streams")
    streams.locator("summary").click()
    expect(streams).to_contain_text("SECRET-ERR: the hidden one")
    expect(streams).to_contain_text("start")
    ines.screenshot(path=shots / "submission-streams-1280.png", full_page=True)
