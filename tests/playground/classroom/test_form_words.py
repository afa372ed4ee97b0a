"""Every refusal the API gives the assignment editor and the course policy form, through the
forms' own wording (static/js/classroom/form_words.js, run by node): each reads in the form's words
(no JSON field name, no "tests.2", no pydantic sentence) and is placed on a field the form has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from typing import Any

import pytest

from runner.config import PROJECT_ROOT
from tests.playground.classroom.test_courses_api import DOUBLE_TEST, assignment_body, new_course, person
from tests.playground.conftest import api

pytestmark = [pytest.mark.django_db, pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")]

T = DOUBLE_TEST
CHECKED = {"name": "c", "check_code": "x"}
ASSIGNMENTS: list[dict[str, Any]] = [
    {"title": ""}, {"title": "x" * 300}, {"runtime": "cobol"}, {"limits": {"memory_mib": -1}},
    {"limits": {"memory_mib": 10**9}}, {"limits": {"memory_mib": 1.5}}, {"limits": {"wall_timeout_s": 10**9}},
    {"egress": ["not a rule"]}, {"egress": ["10.0.0.1:80"]},
    {"opens_at": "2027-01-02T00:00:00Z", "due_at": "2027-01-01T00:00:00Z"}, {"due_at": "tomorrow"},
    {"dataset_ids": [str(uuid.uuid4())]}, {"attempts_allowed": -1}, {"attempts_allowed": 10**6},
    {"instructions": "x" * (2 << 20)}, {"starter_code": "x" * (2 << 20)}, {"tests": [T] * 101},
    {"tests": [T, T, {**T, "name": ""}]}, {"tests": [T, T, {**T, "name": "n" * 300}]},
    {"tests": [T, T, {**T, "points": 5000}]}, {"tests": [T, T, {**T, "points": -1}]},
    {"tests": [T, T, {"name": "c", "expected_stdout": None, "check_code": ""}]},
    {"tests": [T, T, {"name": "c", "expected_stdout": "1", "check_code": "print(1)"}]},
    {"tests": [T, T, {**T, "match": "regex", "expected_stdout": "("}]},
    {"tests": [T, T, {**CHECKED, "check_runtime": "cobol"}]}, {"tests": [T, T, {**T, "stdin": "x" * (2 << 20)}]},
    {"tests": [T, T, {**T, "args": ["a\u0000"]}]}, {"tests": [T, T, {**T, "args": ["a"] * 65}]},
    {"tests": [T, T, {**T, "expected_stdout": "x" * (2 << 20)}]},
    {"tests": [T, T, {**CHECKED, "check_code": "x" * (2 << 20)}]},
]  # fmt: skip
POLICIES: list[dict[str, Any]] = [
    {"late_days": -1}, {"late_days": 400}, {"late_days_per_assignment": 400}, {"quota_runs_per_hour": 0},
    {"quota_concurrent_runs": 0}, {"allowed_runtimes": []}, {"limits_ceiling": {"memory_mib": 10**9}},
    {"limits_ceiling": {"cpu_time_s": -1}}, {"egress_ceiling": ["bad"]}, {"egress_ceiling": ["10.0.0.1:80"]},
]  # fmt: skip
# What only an API client can send (the forms offer a choice or a checkbox): not worded by the forms.
API_ONLY = {"runtime", "visibility", "match"}
TRANSLATE = """
import { ASSIGNMENT_LABELS, COURSE_LABELS, formRefusal } from "./static/js/classroom/form_words.js";
const cases = JSON.parse(process.argv[1]);
const labels = { assignment: ASSIGNMENT_LABELS, course: COURSE_LABELS };
const worded = cases.map(([form, error]) => formRefusal({ message: error.message, data: error }, labels[form]));
console.log(JSON.stringify(worded));
"""
API_WORDS = re.compile(r"\b[a-z]+_[a-z_]+\b|\btests\.\d|\b(?:String|Input|List) should\b")


def _refusals() -> list[tuple[str, dict[str, Any]]]:
    client = api(person("ines"))
    course = new_course(client)
    found = []
    for change in ASSIGNMENTS:
        body = json.dumps({**assignment_body(), **change})
        response = client.post(f"/api/courses/{course['id']}/assignments", body, content_type="application/json")
        assert response.status_code in (404, 422), (change, response.status_code)
        found.append(("assignment", response.json()))
    for change in POLICIES:
        response = client.generic("PATCH", f"/api/courses/{course['id']}", json.dumps(change), "application/json")
        assert response.status_code == 422, (change, response.status_code)
        found.append(("course", response.json()))
    return found


def test_every_refusal_the_forms_can_get_reads_in_the_forms_words_on_one_of_their_fields() -> None:
    refusals = _refusals()
    script = subprocess.run(["node", "--input-type=module", "-e", TRANSLATE, json.dumps(refusals)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    worded = json.loads(script.stdout)
    assert len(worded) == len(refusals) == len(ASSIGNMENTS) + len(POLICIES)
    for (_, error), said in zip(refusals, worded, strict=True):
        path = [*(error.get("field") or "").split("."), "", "", ""]
        if path[0] in API_ONLY or (path[0] == "tests" and path[2] in API_ONLY):
            continue
        assert not API_WORDS.search(said["message"]), (error, said)
        assert said["field"] and said["field"].split(".")[0] == path[0], (error, said)  # beside the field it is about
    messages = [said["message"] for said in worded]
    assert "Test 3: write a check program, or compare with an expected output" in messages
    assert "Late days per student: at most 365" in messages
