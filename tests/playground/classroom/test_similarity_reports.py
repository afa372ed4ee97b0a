"""Similarity reports through the API: asked for by staff, made (here by calling the task's body,
in runner.bounded's children as the worker does), followed by their progress, and each pair opened
recorded as a staff access to both students' work."""

from __future__ import annotations

from typing import Any

import pytest

from playground.classroom import similarity, similarity_reports
from playground.models import SimilarityReport, StaffAccess, Submission
from tests.playground.classroom.test_browser_grades import COPY, ORIGINAL, OWN, STARTER
from tests.playground.classroom.test_courses_api import call, joined, new_assignment, new_course, person
from tests.playground.conftest import api

pytestmark = pytest.mark.django_db


def _course_with_three() -> tuple[Any, dict[str, Any], dict[str, str]]:
    teacher = person("teacher")
    instructor = api(teacher)
    course = new_course(instructor)
    assignment = new_assignment(instructor, course["id"], starter_code=STARTER)
    ids = {}
    for name, code in (("stu", ORIGINAL), ("sue", COPY), ("sam", OWN)):
        _, student = joined(course, name)
        ids[name] = call(student, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": code}, 201)["id"]
    call(instructor, "POST", f"/api/assignments/{assignment['id']}/submissions", {"code": ORIGINAL}, 201)  # staff's
    return (teacher, instructor), assignment, ids


def test_a_report_finds_the_copied_pair_and_each_pair_opened_is_recorded() -> None:
    (teacher, instructor), assignment, ids = _course_with_three()
    asked = call(instructor, "POST", f"/api/assignments/{assignment['id']}/similarity", {}, 202)
    assert asked["state"] == "queued" and asked["threshold"] == similarity.THRESHOLD
    again = call(instructor, "POST", f"/api/assignments/{assignment['id']}/similarity", {"threshold": 0.9}, 202)
    assert again["id"] == asked["id"]  # one report at a time per assignment
    similarity_reports.report_make(asked["id"])
    report = call(instructor, "GET", f"/api/similarity/{asked['id']}")
    assert report["state"] == "done" and report["submissions"] == 3  # students only: not the instructor's
    assert report["done"] == report["total"] > 0
    assert [{p["a"]["student"], p["b"]["student"]} for p in report["pairs"]] == [{"stu", "sue"}]
    assert "code" not in str(report["pairs"])
    listed = call(instructor, "GET", f"/api/assignments/{assignment['id']}/similarity")
    assert [r["id"] for r in listed] == [asked["id"]]
    pair = call(instructor, "GET", f"/api/similarity/{asked['id']}/pairs/0")
    sides = {pair["a"]["student"]: pair["a"], pair["b"]["student"]: pair["b"]}
    assert sides["stu"]["code"] == ORIGINAL and sides["sue"]["code"] == COPY
    for side in sides.values():
        lines = side["code"].splitlines()
        assert side["regions"] and all(0 <= start < end <= len(side["code"]) for start, end, _, _ in side["regions"])
        assert all(side["code"][start:end].strip() in "\n".join(lines[first - 1 : last]) for start, end, first, last
                   in side["regions"])  # fmt: skip
        assert all(first > 1 for _, _, first, _ in side["regions"])  # the starter (line 1) never counts
    recorded = StaffAccess.objects.filter(staff=teacher, what="similarity pair")
    assert sorted(recorded.values_list("owner__username", flat=True)) == ["stu", "sue"]
    assert all(ids[name] in {pair["a"]["submission_id"], pair["b"]["submission_id"]} for name in ("stu", "sue"))


def test_a_report_that_cannot_be_made_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    (_, instructor), assignment, _ = _course_with_three()
    monkeypatch.setattr(similarity, "SUBMISSIONS_MAX", 2)
    asked = call(instructor, "POST", f"/api/assignments/{assignment['id']}/similarity", {}, 202)
    similarity_reports.report_make(asked["id"])
    report = call(instructor, "GET", f"/api/similarity/{asked['id']}")
    assert report["state"] == "failed" and "at most 2" in report["error"] and report["pairs"] == []
    assert SimilarityReport.objects.get(id=asked["id"]).finished_at is not None
    assert Submission.objects.count() == 4  # nothing of the students' changed
