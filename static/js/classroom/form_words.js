// The API's refusal of an assignment or a course policy, in the form's own words and placed where
// the form shows it: "tests.2: give either expected_stdout or check_code (exactly one)" becomes
// "Test 3: write a check program, or compare with an expected output", next to Test 3. The API
// keeps naming its JSON fields (its clients write JSON); the forms name their labels. Pure: no DOM.

import { LIMITS } from "../cordon.js";

// Each form's fields by their API names, as its labels read.
export const ASSIGNMENT_LABELS = {
  title: "Title", instructions: "Instructions", runtime: "Runtime", environment: "Environment",
  starter_code: "Starter code",
  dataset_ids: "Datasets", limits: "Limits", egress: "Network", opens_at: "Opens", due_at: "Due",
  attempts_allowed: "Attempts allowed", accept_late: "Accept late submissions", tests: "Tests",
};
export const COURSE_LABELS = {
  title: "Title", allowed_runtimes: "Allowed runtimes", require_vm: "Require microVM isolation",
  quota_concurrent_runs: "Runs at once, per student", quota_runs_per_hour: "Runs per hour, per student",
  late_days: "Late days per student", late_days_per_assignment: "At most on one assignment",
  limits_ceiling: "Limits ceiling", egress_ceiling: "Network",
};
const TEST_LABELS = {
  name: "Name", points: "Points", visibility: "Visibility", stdin: "Standard input", args: "Arguments",
  expected_stdout: "Expected stdout", match: "Match", check_code: "Check program",
  check_runtime: "Check program's runtime",
};
const LIMIT_LABELS = Object.fromEntries(LIMITS.map(([name, label]) => [name, `${label} limit`]));

// Pydantic's sentences, and the API's own about a field, as a form says them.
const PHRASES = [
  [/^String should have at least 1 character$/, () => "cannot be empty"],
  [/^String should have at most (\d+) characters?$/, (n) => `at most ${n} characters`],
  [/^Input should be greater than or equal to (\S+)$/, (n) => `at least ${n}`],
  [/^Input should be less than or equal to (\S+)$/, (n) => `at most ${n}`],
  [/^Input should be greater than (\S+)$/, (n) => `more than ${n}`],
  [/^Input should be less than (\S+)$/, (n) => `less than ${n}`],
  [/^List should have at most (\d+) items? after validation, not (\d+)$/, (n, given) => `at most ${n} (there are ${given})`],
  [/^List should have at least (\d+) items? after validation, not \d+$/, (n) => `choose at least ${n}`],
  [/^Input should be a valid datetime.*$/, () => "not a date and time"],
  [/^Input should be a valid UUID.*$/, () => "not one of the course's datasets"],
  [/^Input should be (.+)$/, (choices) => `one of ${choices}`],
  [/^must be an array$/, () => "one a line"],
  [/^stdin is (.+)$/, (size) => `it is ${size}`],
];

function plain(text) {
  for (const [pattern, words] of PHRASES) {
    const found = pattern.exec(text);
    if (found) return words(...found.slice(1));
  }
  return text;
}

// "tests.2.points" -> "Test 3, Points"; "limits.memory_mib" -> "Limits, memory limit".
function fieldWords(path, labels) {
  const [head, second, third] = path.split(".");
  if (head === "tests" && second !== undefined && /^\d+$/.test(second)) {
    const test = `Test ${Number(second) + 1}`;
    return third ? `${test}, ${TEST_LABELS[third] || third}` : test;
  }
  const label = labels[head] || head;
  if (second === undefined) return label;
  if (/^\d+$/.test(second)) return label;  // one of a list's items: the field is the list
  return `${label}, ${LIMIT_LABELS[second] || second.replaceAll("_", " ")}`;
}

// Every API name still in a sentence, as its label ("due_at must be after opens_at").
function namesAsLabels(text, labels) {
  const all = { ...TEST_LABELS, ...labels };
  return text.replace(/\b[a-z]+(?:_[a-z]+)+\b/g, (name) => (all[name] ? all[name] : name));
}

// {field, message}: where the form shows the refusal (a data-field path) and what it says there.
export function formRefusal(error, labels) {
  const data = (error && error.data) || {};
  const field = typeof data.field === "string" ? data.field : "";
  let text = String((error && error.message) || "not accepted");
  const test = /^tests\.(\d+)/.exec(field);
  if (data.code === "invalid_test" && /give either expected_stdout or check_code/.test(text) && test) {
    return { field: `tests.${test[1]}`, message: `Test ${Number(test[1]) + 1}: write a check program, or compare with an expected output` };
  }
  if (data.code === "dataset_not_found") {
    return { field: "dataset_ids", message: "Datasets: one of them is no longer the course's; reload the page" };
  }
  if (data.code === "invalid_dates") return { field, message: "Due: must be after Opens" };
  if (!field) return { field, message: namesAsLabels(text, labels) };
  // The API's sentence starts with the field it is about (or the part of it it names): said once, as its label.
  const top = field.split(".")[0];
  for (const prefix of [field, ...prefixes(field), top === "egress_ceiling" ? "egress" : top]) {
    const lead = new RegExp(`^${prefix.replaceAll(".", "\\.")}(?: \\(test '[^']*'\\))?:? `);
    if (lead.test(text)) {
      text = text.replace(lead, "");
      break;
    }
  }
  return { field, message: `${fieldWords(field, labels)}: ${namesAsLabels(plain(text), labels)}` };
}

function prefixes(path) {
  const parts = path.split(".");
  return parts.slice(1).map((_, n) => parts.slice(0, parts.length - 1 - n).join("."));
}
