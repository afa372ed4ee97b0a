// static/js/classroom/form_words.js: the API's refusal of an assignment or a course policy in the
// form's words, placed where the form shows it. (tests/playground/classroom/test_form_words.py runs
// every refusal the API really gives through it.)
import assert from "node:assert/strict";
import { test } from "node:test";

import { ASSIGNMENT_LABELS, COURSE_LABELS, formRefusal } from "../../static/js/classroom/form_words.js";

const refusal = (code, field, message) => ({ message, data: { code, field, message } });

test("a test with neither an expected output nor a check program is named as the form names it, beside it", () => {
  const error = refusal("invalid_test", "tests.2.expected_stdout", "tests.2: give either expected_stdout or check_code (exactly one)");
  assert.deepEqual(formRefusal(error, ASSIGNMENT_LABELS), {
    field: "tests.2", message: "Test 3: write a check program, or compare with an expected output",
  });
});

test("a test's field is its number and its label, pydantic's sentence in plain words", () => {
  const points = refusal("invalid_request", "tests.0.points", "tests.0.points: Input should be less than or equal to 1000");
  assert.deepEqual(formRefusal(points, ASSIGNMENT_LABELS), { field: "tests.0.points", message: "Test 1, Points: at most 1000" });
  const name = refusal("invalid_request", "tests.4.name", "tests.4.name: String should have at least 1 character");
  assert.equal(formRefusal(name, ASSIGNMENT_LABELS).message, "Test 5, Name: cannot be empty");
  const pattern = refusal("invalid_test", "tests.1.expected_stdout",
    "tests.1.expected_stdout (test 'doubles'): not a pattern RE2 accepts: missing ): (");
  assert.equal(formRefusal(pattern, ASSIGNMENT_LABELS).message, "Test 2, Expected stdout: not a pattern RE2 accepts: missing ): (");
});

test("the assignment's own fields read as their labels, the dates as the form names them", () => {
  assert.equal(formRefusal(refusal("invalid_dates", "due_at", "due_at must be after opens_at"), ASSIGNMENT_LABELS).message,
    "Due: must be after Opens");
  const memory = refusal("limit_over_maximum", "limits.memory_mib", "limits.memory_mib is over the maximum on this service (maximum 4096)");
  assert.equal(formRefusal(memory, ASSIGNMENT_LABELS).message, "Limits, memory limit: is over the maximum on this service (maximum 4096)");
  const tests = refusal("invalid_request", "tests", "tests: List should have at most 50 items after validation, not 101");
  assert.equal(formRefusal(tests, ASSIGNMENT_LABELS).message, "Tests: at most 50 (there are 101)");
  const egress = refusal("egress_invalid", "egress", "egress: '10.0.0.1:80': destinations are names, never addresses");
  assert.equal(formRefusal(egress, ASSIGNMENT_LABELS).message, "Network: '10.0.0.1:80': destinations are names, never addresses");
});

test("the course policy's fields read as its form's labels", () => {
  const days = refusal("invalid_request", "late_days", "late_days: Input should be less than or equal to 365");
  assert.deepEqual(formRefusal(days, COURSE_LABELS), { field: "late_days", message: "Late days per student: at most 365" });
  const ceiling = refusal("egress_invalid", "egress_ceiling", "egress: 'bad': a destination is host:port with a port from 1 to 65535");
  assert.equal(formRefusal(ceiling, COURSE_LABELS).message, "Network: 'bad': a destination is host:port with a port from 1 to 65535");
  const runtimes = refusal("invalid_request", "allowed_runtimes", "allowed_runtimes: List should have at least 1 item after validation, not 0");
  assert.equal(formRefusal(runtimes, COURSE_LABELS).message, "Allowed runtimes: choose at least 1");
});

test("a refusal about no field keeps its words, API names as labels", () => {
  assert.deepEqual(formRefusal({ message: "the course is gone", data: { code: "gone" } }, ASSIGNMENT_LABELS),
    { field: "", message: "the course is gone" });
  assert.equal(formRefusal(new Error("network down"), ASSIGNMENT_LABELS).message, "network down");
});
