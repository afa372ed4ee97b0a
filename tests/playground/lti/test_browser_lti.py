"""Cordon launched from an LMS in a real browser: the loopback LMS's own pages post the OIDC login and
the launch; the instructor places an assignment with Deep Linking (in a window, then in the LMS's
iframe) and syncs the roster, a student launches it, submits and is graded by the real grader, and
the LMS receives the score, and again after the instructor's regrade."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from playground.classroom import courses as course_services
from playground.lti.models import ContextLink, LtiUser, Platform
from tests.playground.classroom.test_browser_courses import GRADE_S, _expect_ready, _type_code
from tests.playground.lti.platform import INSTRUCTOR, LEARNER, LoopbackPlatform, Message, Person
from tests.playground.test_browser import (  # noqa: F401 - chromium, shots and site are fixtures
    BROWSER_MARKS,
    Browser,
    chromium,
    expect_fits_a_phone,
    shots,
    site,
)

pytestmark = BROWSER_MARKS

TEACHER = Person("lms-teacher-1", INSTRUCTOR, name="Ines Teacher", given_name="Ines", family_name="Teacher")
STUDENT = Person("lms-student-7", LEARNER, name="Stu Dent", given_name="Stu", family_name="Dent")
CONTEXT = "ctx-101"
SOLUTION = "print(int(input()) * 2)"


@pytest.fixture
def lms(site: str) -> Iterator[LoopbackPlatform]:  # noqa: F811
    with LoopbackPlatform(tool_base=site) as platform:
        yield platform


@pytest.fixture
def course_id(lms: LoopbackPlatform, transactional_db: None) -> str:
    """Made before the browser starts (the ORM refuses to run inside Playwright's event loop): the
    LMS registered in the console, and the course its instructor's first launch made (as the other
    tests show it does), with an assignment of two tests, published."""
    platform = Platform.objects.create(**lms.platform_fields())
    teacher = User.objects.create_user("ines.teacher.lti1")
    teacher.set_unusable_password()
    teacher.save()
    LtiUser.objects.create(platform=platform, sub=TEACHER.sub, user=teacher)
    course = course_services.course_create(user=teacher, title="Intro to Programming")
    ContextLink.objects.create(platform=platform, deployment_id=lms.deployment_id, context_id=CONTEXT, course=course,
                               title="Intro to Programming")  # fmt: skip
    tests = [
        {"name": "doubles 2", "stdin": "2", "expected_stdout": "4", "points": 1},
        {"name": "doubles 21", "stdin": "21", "expected_stdout": "42", "points": 2},
    ]
    assignment = course_services.assignment_save(
        course=course, data={"title": "Double", "runtime": "python", "tests": tests,
                             "instructions": "Print the double of the number read."},
    )  # fmt: skip
    course_services.assignment_publish(assignment=assignment, by=teacher, confirm=True)
    lms.members[CONTEXT] = [
        {"user_id": TEACHER.sub, "roles": INSTRUCTOR, "given_name": "Ines", "family_name": "Teacher"},
        {"user_id": STUDENT.sub, "roles": LEARNER, "given_name": "Stu", "family_name": "Dent"},
    ]
    return str(course.id)


def _wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _phone(page: Any, shots: Path, name: str) -> None:  # noqa: F811
    page.screenshot(path=shots / f"{name}-1280.png", full_page=True)
    expect_fits_a_phone(page, shots / f"{name}-390.png")


def test_an_lms_places_an_assignment_syncs_its_roster_and_receives_scores(
    course_id: str,
    lms: LoopbackPlatform,
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    # The instructor adds a Cordon assignment from the LMS (Deep Linking): the picker, then back.
    ines = chromium.page(chromium.context(), "ines")
    ines.goto(f"{lms.base}/start/{lms.add(Message(TEACHER, CONTEXT, deep_link=True))}")
    expect(ines.locator("#lti-pick h1")).to_have_text("Add a Cordon assignment to Loopback LMS")
    expect(ines.locator("#lti-pick label")).to_contain_text("Double")
    _phone(ines, shots, "lti-deep-link-picker")
    ines.get_by_role("button", name="Add to Loopback LMS").click()
    expect(ines.locator("#received")).to_have_text("Added: Double")
    (item,) = lms.deep_links[-1]
    assert item["title"] == "Double" and item["lineItem"]["scoreMaximum"] == 3

    # Again from the LMS's page that shows the picker in its iframe, as Canvas and Moodle do.
    framed = chromium.page(chromium.context(), "ines-framed")
    framed.goto(f"{lms.base}/frame/{lms.add(Message(TEACHER, CONTEXT, deep_link=True))}")
    tool = framed.frame_locator("#tool")
    expect(tool.locator("#lti-pick h1")).to_have_text("Add a Cordon assignment to Loopback LMS")
    tool.get_by_role("button", name="Add to Loopback LMS").click()
    expect(tool.locator("#received")).to_have_text("Added: Double")
    assert len(lms.deep_links) == 2 and lms.deep_links[-1][0]["custom"] == item["custom"]

    # The roster, from the LMS's NRPS.
    ines.goto(f"{site}/lti/courses/{course_id}/")
    ines.get_by_role("button", name="Sync roster from the LMS").click()
    expect(ines.locator(".flash")).to_contain_text("1 added, 0 roles changed, 1 unchanged")

    # The student opens the placed link, submits, and is graded by the real grader.
    stu = chromium.page(chromium.context(), "stu")
    link = Message(STUDENT, CONTEXT, resource_link_id=lms.last_placed, custom=lms.placed_custom())
    stu.goto(f"{lms.base}/start/{lms.add(link)}")
    _expect_ready(stu, "#assignment")
    expect(stu.locator(".top nav")).to_contain_text("stu.dent.lti")
    _type_code(stu, stu.locator("#editor"), SOLUTION)
    stu.get_by_role("button", name="Submit").click()
    expect(stu.locator("#current .score")).to_have_text("3/3", timeout=GRADE_S)
    _wait_for(lambda: len(lms.scores) == 1, 60)
    score = lms.scores[0]
    assert (score["userId"], score["scoreGiven"], score["scoreMaximum"]) == (STUDENT.sub, 3, 3)
    assert (score["activityProgress"], score["gradingProgress"]) == ("Completed", "FullyGraded")

    # The instructor regrades: the LMS receives the score again.
    ines.goto(f"{site}/courses/{course_id}/")
    _expect_ready(ines, "#course")
    ines.once("dialog", lambda dialog: dialog.accept())
    ines.get_by_role("button", name="regrade every submission of Double").click()
    _wait_for(lambda: len(lms.scores) == 2, GRADE_S / 1000)
    assert lms.scores[1]["scoreGiven"] == 3 and lms.scores[1]["userId"] == STUDENT.sub

    ines.goto(f"{site}/lti/courses/{course_id}/")
    expect(ines.locator("#lti-passbacks tbody tr")).to_have_count(2)
    expect(ines.locator('#lti-passbacks tr[data-state="sent"]')).to_have_count(2)
    _phone(ines, shots, "lti-course")

    # A launch Cordon refuses (a deployment it does not know), and a course nobody set up.
    other = chromium.page(chromium.context(), "other")
    other.goto(f"{lms.base}/start/{lms.add(Message(STUDENT, CONTEXT, deployment_id='deployment-9'))}")
    expect(other.locator("#lti-refused")).to_contain_text("unknown deployment id for this LMS")
    _phone(other, shots, "lti-refused")
    chromium.errors[:] = [e for e in chromium.errors if not (e[0] == "other" and "status of 403" in e[1])]
    other.goto(f"{lms.base}/start/{lms.add(Message(STUDENT, 'ctx-nobody', resource_link_id='rl-9'))}")
    expect(other.locator("#lti-not-set-up h1")).to_have_text("Your instructor has not set this up yet")
    _phone(other, shots, "lti-not-set-up")
