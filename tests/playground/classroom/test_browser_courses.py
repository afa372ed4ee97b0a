"""Classrooms in a real browser: an instructor makes a course and an assignment with a visible and
a hidden test, a student joins by code, tries and submits a solution and sees it graded without
ever receiving the hidden test's input or expected output, and the instructor sees the score."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.playground.test_browser import (  # noqa: F401 - chromium, shots and site are fixtures
    BROWSER_MARKS,
    PASSWORD,
    RUN_S,
    Browser,
    chromium,
    shots,
    site,
)

pytestmark = BROWSER_MARKS

COURSE_URL = re.compile(r"/courses/[0-9a-f-]{36}/$")
GRADE_S = 180_000  # ms: grading runs each test in a sandbox of its own, queued behind others
INSTRUCTIONS = "Read a number from stdin and print its double.\n\nFor example, *3* gives **6**."
STARTER = "n = int(input())\n# print the double of n\n"
SOLUTION = "print(int(input()) * 2)"
HIDDEN = {"21", "42"}  # the hidden test's stdin and expected stdout: never sent to the student
HIDDEN_FIELDS = {"stdin", "args", "expected_stdout", "check_code", "detail", "diff", "feedback"}
# Every text node in the page, shown or not (a closed <details> too), one apart from the next; the
# run view (its figures) and dates left out, where digits are no test's data.
_TEXT_SHOWN = """() => {
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  const parts = [];
  while (walker.nextNode()) {
    if (!walker.currentNode.parentElement.closest("#run-view, .when")) parts.push(walker.currentNode.data);
  }
  return parts.join(" ");
}"""


@pytest.fixture
def people(transactional_db: None) -> None:
    """Made before the browser starts: the ORM refuses to run inside Playwright's event loop."""
    User.objects.create_user("ines", password=PASSWORD)
    User.objects.create_user("stu", password=PASSWORD)


def test_a_student_submits_to_an_assignment_with_a_hidden_test_and_the_instructor_sees_the_grade(
    people: None,
    chromium: Browser,  # noqa: F811
    site: str,  # noqa: F811
    shots: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    ines = chromium.logged_in("ines")
    course_url, code = _instructor_makes_a_course(ines, site, shots)
    _instructor_writes_an_assignment(ines, chromium, shots)
    _instructor_publishes_it_from_the_editor(ines, shots)
    stu = chromium.logged_in("stu")
    answers: list[tuple[str, Any]] = []
    stu.on("response", lambda response: _collect(response, answers))
    _student_joins_and_opens_the_assignment(stu, code, course_url, shots)
    _student_runs_and_submits(stu, shots)
    _nothing_of_the_hidden_test_reached_the_student(stu, answers)
    _instructor_reads_the_grade_and_the_submission(ines, course_url, shots)
    _someone_joins_by_the_link(chromium, site, code, course_url)
    _instructor_imports_a_roster(ines, course_url, tmp_path)
    _instructor_saves_the_policy(ines, chromium, shots)


def _instructor_makes_a_course(ines: Any, base: str, shots_dir: Path) -> tuple[str, str]:
    from playwright.sync_api import expect

    # The instructor makes a course; its page shows the join code.
    ines.get_by_role("link", name="Courses").click()
    ines.fill("#course-title", "Programming 101")
    ines.get_by_role("button", name="Create course").click()
    expect(ines).to_have_url(COURSE_URL)
    course_url = ines.url
    _expect_ready(ines, "#course")
    expect(ines.locator(".role-badge")).to_have_text("instructor")
    code = ines.locator("#join-code").inner_text().strip()
    assert re.fullmatch(r"[A-Z0-9]{6,16}", code), code
    expect(ines.locator("#join-link")).to_have_text(f"{base}/courses/join/{code}/")
    ines.screenshot(path=shots_dir / "course-new-1280.png", full_page=True)
    return course_url, code


def _instructor_writes_an_assignment(ines: Any, browser: Browser, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # An assignment with a visible and a hidden test; a refused save names the field at fault.
    ines.get_by_role("link", name="New assignment").click()
    _expect_ready(ines, "#assignment-editor")
    ines.fill("#title", "Double")
    ines.fill("#instructions", INSTRUCTIONS)
    expect(ines.locator("#runtime")).to_have_value("python")
    _type_code(ines, ines.locator("#starter-code"), STARTER)
    ines.fill("#attempts", "3")
    visible = ines.locator("fieldset.test-form").nth(0)
    _fill_test(visible, name="doubles 2", stdin="2", expected="4")
    ines.get_by_role("button", name="+ Add test").click()
    hidden = ines.locator("fieldset.test-form").nth(1)
    _fill_test(hidden, name="", stdin="21", expected="42")
    hidden.get_by_label("Visibility", exact=True).select_option("hidden")
    ines.get_by_role("button", name="Save assignment").click()
    expect(ines.locator('[data-field="tests.1.name"] .field-error')).to_have_text("Test 2, Name: cannot be empty")
    _expect_status_logged(browser, "page", 422)
    ines.screenshot(path=shots_dir / "assignment-editor-error-1280.png", full_page=True)
    hidden.get_by_label("Name", exact=True).fill("secret case")
    # A test with neither an expected output nor a check program: said in the form's words, beside it.
    ines.get_by_role("button", name="+ Add test").click()
    third = ines.locator("fieldset.test-form").nth(2)
    third.get_by_label("Run a check program").check()
    ines.get_by_role("button", name="Save assignment").click()
    said = "Test 3: write a check program, or compare with an expected output"
    expect(third.locator(".field-error")).to_have_text(said)
    expect(ines.locator("#message")).to_have_text(f"Not saved: {said} (see the field marked below)")
    _expect_status_logged(browser, "page", 422)
    third.get_by_role("button", name="remove test 3").click()
    ines.get_by_role("button", name="Save assignment").click()
    expect(ines.locator("#save-status")).to_have_text("saved")
    expect(ines.locator(".field-error")).to_have_count(0)
    assert re.search(r"/assignments/[0-9a-f-]{36}/edit/$", ines.url), ines.url
    expect(ines.locator("#draft-note")).to_be_visible()
    ines.screenshot(path=shots_dir / "assignment-editor-1280.png", full_page=True)


def _instructor_publishes_it_from_the_editor(ines: Any, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # A draft until published, from the editor itself: the confirmation lists what students will see.
    ines.get_by_role("button", name="Publish…").click()
    dialog = ines.locator("#publish-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Tests shown in full (input and expected output): doubles 2")
    expect(dialog).to_contain_text("Tests shown by name, points and pass/fail only: secret case")
    ines.screenshot(path=shots_dir / "assignment-publish-1280.png")
    dialog.get_by_role("button", name="Publish", exact=True).click()
    expect(ines.locator("#message")).to_have_text("Published: the course's students see it.")
    expect(ines.locator("#publish-here")).to_be_hidden()
    expect(ines.locator("#draft-note")).to_be_hidden()
    # Its page says so; back to draft there, and published again the same way.
    ines.get_by_role("link", name="View it", exact=True).click()
    _expect_ready(ines, "#staff-panel")
    expect(ines.locator("#publishing")).to_contain_text("Published")
    ines.get_by_role("button", name="Back to draft").click()
    expect(ines.locator("#publishing")).to_contain_text("Draft")
    ines.get_by_role("button", name="Publish…").click()
    expect(dialog).to_contain_text("Tests shown by name, points and pass/fail only: secret case")
    dialog.get_by_role("button", name="Publish", exact=True).click()
    expect(ines.locator("#publishing")).to_contain_text("Published")


def _student_joins_and_opens_the_assignment(stu: Any, code: str, course_url: str, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # The student joins with the code, in a browser of their own.
    stu.get_by_role("link", name="Courses").click()
    _expect_ready(stu, "#courses-page")
    expect(stu.locator("#course-list")).to_contain_text("No courses yet")
    stu.screenshot(path=shots_dir / "courses-1280.png", full_page=True)
    stu.fill("#join-code", code.lower())
    stu.get_by_role("button", name="Join", exact=True).click()
    expect(stu).to_have_url(course_url)
    _expect_ready(stu, "#course")
    expect(stu.locator("#gradebook")).to_have_count(0)  # staff only
    row = stu.locator("#assignments tbody tr", has_text="Double")
    expect(row).to_contain_text("0 used, 3 left")
    stu.screenshot(path=shots_dir / "course-student-1280.png", full_page=True)
    row.get_by_role("link", name="Double").click()
    _expect_ready(stu, "#assignment")
    expect(stu.locator("#instructions em")).to_have_text("3")
    expect(stu.locator("#instructions strong")).to_have_text("6")
    expect(stu.locator("#facts")).to_contain_text("3 of 3 left")
    expect(stu.locator("#editor .cm-content")).to_contain_text("# print the double of n")
    tests = stu.locator("#tests > li")
    expect(tests).to_have_count(2)
    expect(tests.nth(0)).to_contain_text("doubles 2")
    expect(tests.nth(1)).to_contain_text("secret case")
    expect(tests.nth(1)).to_contain_text("hidden")


def _student_runs_and_submits(stu: Any, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # Run: the student's own run with the stdin typed, followed live.
    _type_code(stu, stu.locator("#editor"), SOLUTION)
    stu.fill("#stdin", "5")
    stu.get_by_role("button", name="Run", exact=True).click()
    view = stu.locator("#run-view")
    expect(view).to_have_attribute("data-outcome", "succeeded", timeout=RUN_S)
    expect(view.locator("pre.stdout")).to_have_text("10\n")

    # Submit: graded as it goes, 2/2 with the hidden test named and passed.
    stu.get_by_role("button", name="Submit").click()
    current = stu.locator("#current")
    expect(current.locator(".score")).to_have_text("2/2", timeout=GRADE_S)
    expect(current.locator(".submission")).to_have_attribute("data-state", "graded")
    secret = current.locator("li.test-result", has_text="secret case")
    expect(secret.locator(".status")).to_have_text(re.compile("passed", re.I))
    expect(current.locator("li.test-result", has_text="doubles 2").locator(".status")).to_have_text(
        re.compile("passed", re.I)
    )
    expect(stu.locator("#facts")).to_contain_text("2 of 3 left")
    expect(stu.locator("#history > li")).to_have_count(1)
    stu.screenshot(path=shots_dir / "assignment-graded-1280.png", full_page=True)
    stu.set_viewport_size({"width": 800, "height": 900})
    stu.screenshot(path=shots_dir / "assignment-graded-800.png", full_page=True)
    assert stu.evaluate("document.documentElement.scrollWidth") <= 800  # no sideways scrolling
    stu.set_viewport_size({"width": 1280, "height": 900})


def _nothing_of_the_hidden_test_reached_the_student(stu: Any, answers: list[tuple[str, Any]]) -> None:
    from playwright.sync_api import expect

    # Nowhere on the page, nor in anything the API sent it, is the hidden test's input or output.
    stu.locator("#history details summary").first.click()
    expect(stu.locator("#history .history-body .submission")).to_be_visible()
    shown = stu.evaluate(_TEXT_SHOWN)
    assert "secret case" in shown
    assert not re.search(r"(?<![\d.])(21|42)(?![\d.])", shown), shown
    assert any("/api/assignments/" in url and "/submissions" in url for url, _ in answers), answers
    for url, body in answers:
        _assert_hidden_absent(url, body)


def _instructor_reads_the_grade_and_the_submission(ines: Any, course_url: str, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # The instructor's grid shows the student's score; its cell opens the submission, hidden tests and all.
    ines.goto(course_url)
    _expect_ready(ines, "#course")
    cell = ines.locator('#gradebook tr[data-student="stu"] td.cell').first
    expect(cell).to_contain_text("2/2")
    expect(ines.locator("#members tbody")).to_contain_text("stu")
    ines.screenshot(path=shots_dir / "course-gradebook-1280.png", full_page=True)
    cell.get_by_role("link", name="stu, Double: 2/2").click()
    _expect_ready(ines, "#submission")
    expect(ines.locator("#staff-view")).to_contain_text("recorded")
    expect(ines.locator("#code")).to_have_text(SOLUTION)
    staff_secret = ines.locator("#result li.test-result", has_text="secret case")
    staff_secret.locator(".test-spec summary").click()
    expect(staff_secret.locator(".test-spec pre.io").first).to_have_text("21")
    staff_secret.locator(".test-streams summary").click()  # what the student's program wrote
    expect(staff_secret.locator(".test-streams pre.io").first).to_have_text("42")
    expect(ines.locator("#result").get_by_role("link", name="test run")).to_have_count(2)
    ines.screenshot(path=shots_dir / "submission-staff-1280.png", full_page=True)


def _someone_joins_by_the_link(browser: Browser, base: str, code: str, course_url: str) -> None:
    from playwright.sync_api import expect

    # Someone with the join link: the course's title, then Join.
    ana = browser.logged_in("ana")
    ana.goto(f"{base}/courses/join/{code}/")
    expect(ana.locator("h1")).to_have_text("Join Programming 101")
    ana.get_by_role("button", name="Join Programming 101").click()
    expect(ana).to_have_url(course_url)
    expect(ana.locator(".role-badge")).to_have_text("student")


def _instructor_imports_a_roster(ines: Any, course_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    # A roster: one invited, one already a member, one line not understood.
    ines.goto(course_url)
    _expect_ready(ines, "#course")
    expect(ines.locator("#members tbody tr")).to_have_count(3)
    roster = tmp_path / "roster.csv"
    roster.write_text("username\nstu\nnewbie@example.org,assistant\nno such person!\n")
    ines.set_input_files("#roster-file", str(roster))
    ines.get_by_role("button", name="Import roster", exact=True).click()
    expect(ines.locator("#roster-result")).to_have_text(
        "Invited 1 · already members 1 · already invited 0 · not understood: no such person!"
    )
    expect(ines.locator("#course-invitations tbody")).to_contain_text("newbie@example.org")


def _instructor_saves_the_policy(ines: Any, browser: Browser, shots_dir: Path) -> None:
    from playwright.sync_api import expect

    # The policy: a ceiling over the service's maximum is refused beside its field, then one within it saved.
    memory = ines.locator("#limits_ceiling-memory_mib")
    memory.fill(str(int(memory.get_attribute("max")) + 1))
    ines.get_by_role("button", name="Save policy").click()
    expect(ines.locator('[data-field="limits_ceiling.memory_mib"] .field-error')).to_contain_text("maximum")
    _expect_status_logged(browser, "page", 422)
    memory.fill("512")
    ines.get_by_role("button", name="Save policy").click()
    expect(ines.locator("#policy-status")).to_have_text("saved")
    ines.reload()
    _expect_ready(ines, "#course")
    expect(ines.locator("#limits_ceiling-memory_mib")).to_have_value("512")
    ines.screenshot(path=shots_dir / "course-staff-1280.png", full_page=True)


def _expect_ready(page: Any, selector: str) -> None:
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_have_attribute("data-ready", "true", timeout=15_000)


def _type_code(page: Any, box: Any, code: str) -> None:
    box.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)


def _fill_test(test: Any, *, name: str, stdin: str, expected: str) -> None:
    test.get_by_label("Name", exact=True).fill(name)
    test.get_by_label("Points", exact=True).fill("1")
    test.get_by_label("Standard input", exact=True).fill(stdin)
    test.get_by_label("Expected stdout", exact=True).fill(expected)


def _expect_status_logged(driven: Browser, label: str, status: int) -> None:
    """Chromium logs a refused API call as a console error; here that refusal is the point."""
    expected = [e for e in driven.errors if e[0] == label and f"status of {status}" in e[1]]
    assert expected, driven.errors
    driven.errors.remove(expected[0])


def _collect(response: Any, answers: list[tuple[str, Any]]) -> None:
    if "/api/" not in response.url or response.request.method == "OPTIONS":
        return
    try:
        text = response.text()
    except Exception:  # a redirect or a body the browser did not keep
        return
    try:
        answers.append((response.url, json.loads(text)))
    except ValueError:
        answers.append((response.url, text))


def _assert_hidden_absent(url: str, body: Any) -> None:
    """No string in an answer is the hidden test's stdin or expected stdout, and no hidden test's
    entry carries its input, expectation, check program or the grader's details."""
    if isinstance(body, str):
        assert not any(re.search(rf"(?<![\w.:-]){value}(?![\w.:-])", body) for value in HIDDEN), (url, body)
        return
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("visibility") == "hidden":
                assert all(node.get(name) in (None, "") for name in HIDDEN_FIELDS), (url, node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            assert node.strip() not in HIDDEN, (url, node)
