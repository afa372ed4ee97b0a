// The instructor's assignment editor: title, instructions (markdown), runtime, starter code, course
// datasets, limits, dates, attempts and the tests (each with an expected stdout or a check
// program). Saved whole (POST a new one, PUT an existing one); the API's refusal is shown beside
// the field it names, in the form's words ("Test 2, Points: at most 1000"; form_words.js).
// CordonEditor: the CodeMirror bundle (static/vendor/codemirror.js), a classic script loaded before.

import { api, clearFieldErrors, el, limitFields, limitValues, message, showFieldError } from "../cordon.js";
import { egressRules, egressText, egressWords, formatWhen, fromLocalInput, toLocalInput } from "../format.js";
import { ASSIGNMENT_LABELS, formRefusal } from "./form_words.js";
import { confirmPublish, wirePublishDialog } from "./publishing.js";

const root = document.getElementById("assignment-editor");
const courseId = root.dataset.courseId;
let assignmentId = root.dataset.assignmentId || null;
const form = document.getElementById("assignment-form");
const testsBox = document.getElementById("tests");
const VISIBILITIES = [["visible", "visible"], ["hidden", "hidden"], ["after_due", "shown after the due date"]];
const MATCHES = [["strip", "ignoring spaces at line ends and final blank lines"], ["exact", "exactly"], ["regex", "regular expression (the whole output)"]];

let runtimes = [];
let starter = null;
let starterSource = "";
const tests = [];

function status(text) { document.getElementById("save-status").textContent = text; }

// --- the starter code: CodeMirror in the assignment's language -------------------------------

function makeStarter(language) {
  if (starter) starter.destroy();
  const box = document.getElementById("starter-code");
  box.replaceChildren();
  starter = CordonEditor.create(box, { doc: starterSource, language, label: "starter code",
    onChange: (source) => { starterSource = source; } });
}

// --- tests ------------------------------------------------------------------------------------

function options(pairs) {
  return pairs.map(([value, label]) => el("option", { value }, label));
}

class TestForm {
  constructor(data) {
    this.node = el("fieldset", { class: "test-form" });
    this.legend = el("legend", {}, "");
    this.name = el("input", { type: "text", maxlength: "200", class: "test-name-input" });
    this.name.value = data.name || "";
    this.points = el("input", { type: "number", min: "0", step: "any" });
    this.points.value = data.points ?? 1;
    this.visibility = el("select", {}, ...options(VISIBILITIES));
    this.visibility.value = data.visibility || "visible";
    this.stdin = el("textarea", { rows: "3", class: "code-text", spellcheck: "false" });
    this.stdin.value = data.stdin || "";
    this.args = el("textarea", { rows: "3", class: "code-text", spellcheck: "false" });
    this.args.value = (data.args || []).join("\n");
    this.expected = el("textarea", { rows: "3", class: "code-text", spellcheck: "false" });
    this.expected.value = data.expected_stdout ?? "";
    this.match = el("select", {}, ...options(MATCHES));
    this.match.value = data.match || "strip";
    this.checkCode = el("textarea", { rows: "8", class: "code-text", spellcheck: "false" });
    this.checkCode.value = data.check_code || "";
    this.checkRuntime = el("select", {}, el("option", { value: "" }, "the assignment's runtime"),
      ...runtimes.map((r) => el("option", { value: r }, r)));
    this.checkRuntime.value = data.check_runtime || "";
    this.mode = data.check_code ? "check" : "expected";
    this.group = `mode-${Math.random().toString(36).slice(2, 10)}`;
    this.build();
  }

  // Every control with its label, inside a data-field the API's errors name (tests.<i>.<field>).
  field(name, label, control, { wide = false } = {}) {
    const id = `${this.group}-${name}`;
    control.id = id;
    return el("div", { class: `field${wide ? " wide" : ""}`, "data-field-name": name }, el("label", { for: id }, label), control);
  }

  build() {
    const radio = (value, label) => {
      const input = el("input", { type: "radio", name: this.group, value, checked: this.mode === value });
      input.addEventListener("change", () => { this.mode = value; this.showMode(); });
      return el("label", { class: "radio" }, input, ` ${label}`);
    };
    this.expectedBox = el("div", { class: "mode-expected" },
      this.field("expected_stdout", "Expected stdout", this.expected, { wide: true }),
      this.field("match", "Match", this.match));
    this.checkBox = el("div", { class: "mode-check" },
      this.field("check_code", "Check program", this.checkCode, { wide: true }),
      this.field("check_runtime", "Check program's runtime", this.checkRuntime),
      el("p", { class: "help" }, "It runs in a sandbox of its own with the student's results under /input (stdout, ",
        "stderr, exit code, outputs): exit 0 passes the test; what it prints is the student's feedback."));
    this.removeButton = el("button", { type: "button", class: "danger remove-test", onclick: () => removeTest(this) }, "Remove");
    this.node.replaceChildren(this.legend,
      el("div", { class: "field-row" }, this.field("name", "Name", this.name), this.field("points", "Points", this.points),
        this.field("visibility", "Visibility", this.visibility)),
      el("div", { class: "field-row" }, this.field("stdin", "Standard input", this.stdin, { wide: true }),
        this.field("args", "Arguments, one per line", this.args, { wide: true })),
      el("div", { class: "mode", role: "radiogroup", "aria-label": "how the test passes" },
        radio("expected", "Compare with an expected stdout"), " ", radio("check", "Run a check program")),
      this.expectedBox, this.checkBox, el("p", { class: "test-actions" }, this.removeButton));
    this.showMode();
  }

  showMode() {
    this.expectedBox.hidden = this.mode !== "expected";
    this.checkBox.hidden = this.mode !== "check";
  }

  // Its number and the error paths of its fields follow its place in the list.
  place(index) {
    this.legend.textContent = `Test ${index + 1}`;
    this.node.dataset.field = `tests.${index}`;
    this.node.setAttribute("aria-label", `test ${index + 1}`);
    this.removeButton.setAttribute("aria-label", `remove test ${index + 1}`);
    for (const box of this.node.querySelectorAll("[data-field-name]")) box.dataset.field = `tests.${index}.${box.dataset.fieldName}`;
  }

  value() {
    const checked = this.mode === "check";
    return {
      name: this.name.value.trim(),
      points: this.points.value === "" ? null : Number(this.points.value),
      visibility: this.visibility.value,
      stdin: this.stdin.value,
      args: this.args.value.split("\n").filter((line) => line !== ""),
      expected_stdout: checked ? null : this.expected.value,
      match: this.match.value,
      check_code: checked ? this.checkCode.value : null,
      check_runtime: checked ? this.checkRuntime.value || null : null,
    };
  }
}

function placeTests() {
  tests.forEach((test, index) => test.place(index));
  testsBox.replaceChildren(...tests.map((test) => test.node));
  if (!tests.length) testsBox.replaceChildren(el("p", { class: "muted" }, "No tests: submissions score 0 of 0."));
}

function addTest(data = {}) {
  const test = new TestForm({ name: `Test ${tests.length + 1}`, ...data });
  tests.push(test);
  placeTests();
  return test;
}

function removeTest(test) {
  tests.splice(tests.indexOf(test), 1);
  placeTests();
}

// --- load, fill, save -----------------------------------------------------------------------

// The environments of the chosen runtime ("": its own image); the assignment's kept if still offered.
function offerEnvironments(environments, runtime, chosen) {
  const select = document.getElementById("environment");
  const fitting = environments.filter((e) => e.runtime === runtime && e.name !== runtime);
  select.replaceChildren(el("option", { value: "" }, "Default"),
    ...fitting.map((e) => el("option", { value: e.name }, e.description ? `${e.name}: ${e.description}` : e.name)));
  select.value = fitting.some((e) => e.name === chosen) ? chosen : "";
}

function fill(assignment, datasets, limitInfo, course, environments) {
  document.getElementById("title").value = assignment.title || "";
  document.getElementById("instructions").value = assignment.instructions || "";
  const runtime = document.getElementById("runtime");
  const offered = [...new Set([...runtimes, ...(assignment.runtime ? [assignment.runtime] : [])])];
  runtime.replaceChildren(...offered.map((r) => el("option", { value: r }, r)));
  runtime.value = assignment.runtime || offered[0] || "";
  starterSource = assignment.starter_code || "";
  makeStarter(runtime.value);
  offerEnvironments(environments, runtime.value, assignment.environment || "");
  runtime.addEventListener("change", () => {
    makeStarter(runtime.value);
    offerEnvironments(environments, runtime.value, document.getElementById("environment").value);
  });
  const attached = new Set((assignment.datasets || []).map((d) => d.id));
  const choices = document.getElementById("dataset-choices");
  choices.replaceChildren(...datasets.map((d) => el("label", {}, el("input", { type: "checkbox", name: "dataset_ids",
    value: d.id, checked: attached.has(d.id) }), ` ${d.name}`)));
  if (!datasets.length) {
    choices.replaceChildren(el("p", { class: "muted small" }, "This course has no datasets (upload them on the ",
      el("a", { href: `/courses/${courseId}/#datasets-panel` }, "course page"), ")."));
  }
  document.getElementById("limit-fields").replaceChildren(...limitFields(limitInfo, assignment.limits || {}));
  document.getElementById("egress").value = egressText(assignment.egress);
  document.getElementById("egress-ceiling").textContent = egressWords(course.egress_ceiling);
  document.getElementById("opens-at").value = toLocalInput(assignment.opens_at);
  document.getElementById("due-at").value = toLocalInput(assignment.due_at);
  document.getElementById("attempts").value = assignment.attempts_allowed ?? 0;
  document.getElementById("accept-late").checked = Boolean(assignment.accept_late);
  for (const test of assignment.tests || []) addTest(test);
  placeTests();
}

function payload() {
  const attempts = document.getElementById("attempts").value;
  return {
    title: document.getElementById("title").value.trim(),
    instructions: document.getElementById("instructions").value,
    runtime: document.getElementById("runtime").value,
    environment: document.getElementById("environment").value,
    starter_code: starterSource,
    dataset_ids: [...form.querySelectorAll("input[name=dataset_ids]:checked")].map((box) => box.value),
    limits: limitValues(document.getElementById("limit-fields")),
    egress: egressRules(document.getElementById("egress").value),
    opens_at: fromLocalInput(document.getElementById("opens-at").value),
    due_at: fromLocalInput(document.getElementById("due-at").value),
    attempts_allowed: attempts === "" ? 0 : Number(attempts),
    accept_late: document.getElementById("accept-late").checked,
    tests: tests.map((test) => test.value()),
  };
}

async function save(event) {
  event.preventDefault();
  await saveNow();
}

// The form as the assignment (a new one made, an existing one replaced): the saved assignment, or
// null when the API refused it (said beside the field at fault).
async function saveNow() {
  clearFieldErrors(form);
  message("");
  const button = document.getElementById("save");
  button.disabled = true;
  status("saving…");
  try {
    const saved = assignmentId
      ? await api("PUT", `/assignments/${assignmentId}`, payload())
      : await api("POST", `/courses/${courseId}/assignments`, payload());
    if (!assignmentId) {
      assignmentId = saved.id;
      history.replaceState(null, "", `/assignments/${saved.id}/edit/`);
      document.getElementById("delete-assignment").hidden = false;
    }
    document.getElementById("view-link").href = `/assignments/${saved.id}/`;
    document.getElementById("saved-links").hidden = false;
    showPublishing(saved.published);
    document.getElementById("editor-heading").textContent = `Edit ${saved.title}`;
    document.title = `Edit ${saved.title} · Cordon`;
    status("saved");
    return saved;
  } catch (error) {
    status("not saved");
    const refusal = formRefusal(error, ASSIGNMENT_LABELS);  // in the form's words, where the form shows it
    const placed = showFieldError(form, { message: refusal.message, data: { field: refusal.field } });
    message(placed ? `Not saved: ${refusal.message} (see the field marked below)` : `Not saved: ${refusal.message}`);
    const marked = form.querySelector(".field-error");
    if (marked) marked.scrollIntoView({ block: "center" });
    return null;
  } finally {
    button.disabled = false;
  }
}

// A saved draft offers Publish… here, as its page does.
function showPublishing(published) {
  document.getElementById("draft-note").hidden = Boolean(published);
  document.getElementById("publish-here").hidden = Boolean(published) || !assignmentId;
}

// Publish… saves the form first (what is published is what the form says), then asks.
async function publishHere() {
  const saved = await saveNow();
  if (!saved) return;
  await confirmPublish(assignmentId, {
    done: () => {
      showPublishing(true);
      const when = saved.opens_at && new Date(saved.opens_at) > new Date() ? ` from ${formatWhen(saved.opens_at)}` : "";
      message(`Published: the course's students see it${when}.`);
    },
    failed: (error) => message(`Not published: ${error.message}`),
  });
}

async function remove() {
  if (!confirm("Delete this assignment, its tests and every submission to it?")) return;
  try {
    await api("DELETE", `/assignments/${assignmentId}`);
    location.assign(`/courses/${courseId}/`);
  } catch (error) { message(`not deleted: ${error.message}`); }
}

async function start() {
  const [course, datasets, described, assignment, environments] = await Promise.all([
    api("GET", `/courses/${courseId}`), api("GET", `/courses/${courseId}/datasets`), api("GET", "/limits"),
    assignmentId ? api("GET", `/assignments/${assignmentId}`) : Promise.resolve(null), api("GET", "/environments")]);
  const server = root.dataset.runtimes.split(",").filter(Boolean);
  runtimes = course.allowed_runtimes && course.allowed_runtimes.length ? course.allowed_runtimes : server;
  const limitInfo = Object.fromEntries(described.map((limit) => [limit.name, limit]));
  fill(assignment || { title: "", runtime: runtimes[0], tests: [] }, datasets, limitInfo, course, environments);
  if (!assignment) addTest();
  document.getElementById("time-zone").textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  document.getElementById("add-test").addEventListener("click", () => {
    const test = addTest();
    test.name.focus();
  });
  document.getElementById("delete-assignment").addEventListener("click", remove);
  document.getElementById("publish-here").addEventListener("click", () => {
    publishHere().catch((error) => message(`Not published: ${error.message}`));
  });
  wirePublishDialog();
  showPublishing(assignment ? assignment.published : false);
  form.addEventListener("submit", save);
  root.dataset.ready = "true";
}

start().catch((error) => message(`the editor could not be loaded: ${error.message}`));
