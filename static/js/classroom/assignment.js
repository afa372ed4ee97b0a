// A student's assignment page: the instructions (rendered and sanitised by the server), due date,
// attempts, datasets and tests as the student may see them; an editor with a Run button (a run of
// the student's own, followed live as the notebook follows a cell's) and Submit, then the
// submission's grading as it goes, and every earlier submission with its results.
// CordonEditor: the CodeMirror bundle (static/vendor/codemirror.js), a classic script loaded before.

import { api, el, markdownNodes, message } from "../cordon.js";
import { RunView } from "../run_view.js";
import { formatScore, formatWhen, points } from "../format.js";
import { FINAL, facts, follow, testSpec, view, visibilityMark } from "./submission_view.js";

const root = document.getElementById("assignment");
const assignmentId = root.dataset.assignmentId;
const staff = root.dataset.staff === "true";
const username = root.dataset.username;
const runButton = document.getElementById("run");
const submitButton = document.getElementById("submit");
const runView = new RunView(document.getElementById("run-view"), { onActive: () => updateButtons() });

let assignment = null;
let editor = null;
let starting = false;
let submitting = false;
let followed = 0;  // which submission's grading the page follows (a newer one replaces it)

function code() { return editor ? editor.state.doc.toString() : ""; }

const isPast = (iso) => Boolean(iso) && new Date(iso) <= new Date();
// Past due by the server's clock (the API says so), not by this computer's.
const extended = () => Boolean(assignment.my && assignment.my.extended);
const pastDue = () => (extended() ? isPast(assignment.my.due_at)
  : Boolean(assignment.due_at) && (assignment.past_due ?? isPast(assignment.due_at)));
// Late days may still let a late submission through (the server decides how many it needs).
const lateDays = () => (assignment.my && assignment.my.late_days) || null;
const lateDaysMayCover = () => Boolean(lateDays() && lateDays().allowed && (lateDays().left > 0 || lateDays().on_this_assignment > 0));

// --- what the assignment says ---------------------------------------------------------------

// A student who has not submitted may have no `my` yet: none used.
function mine() {
  return assignment.my || (staff ? null : { attempts_used: 0, attempts_left: assignment.attempts_allowed, score: null });
}

function attemptsText() {
  const allowed = assignment.attempts_allowed;
  const my = mine();
  if (!allowed) return my ? `unlimited (${my.attempts_used} used)` : "unlimited";
  if (!my) return `${allowed} allowed`;
  return `${my.attempts_left} of ${allowed} left`;
}

function renderFacts() {
  const a = assignment;
  const rows = [];
  if (a.opens_at && !isPast(a.opens_at)) rows.push(["Opens", formatWhen(a.opens_at)]);
  if (staff) rows.push(["Status", a.published ? "published" : "draft: no student sees it until you publish it"]);
  const due = extended() ? a.my.due_at : a.due_at;
  const yours = extended() ? " (your extension)" : "";
  rows.push(["Due", due ? `${formatWhen(due)}${yours}${pastDue() ? " (past)" : ""}` : "no due date"]);
  if (a.my && a.my.late_days && a.my.late_days.allowed) {
    const days = a.my.late_days;
    rows.push(["Late days", `${days.text} (at most ${days.per_assignment} on one assignment; spent automatically by a late submission)`]);
  }
  rows.push(["Late submissions", a.accept_late ? "accepted, marked late" : "not accepted"]);
  rows.push(["Attempts", attemptsText()]);
  if (a.my && a.my.score !== null && a.my.score !== undefined) rows.push(["Your score", formatScore(a.my.score, a.max_score)]);
  else rows.push(["Points", String(+Number(a.max_score).toFixed(2))]);
  rows.push(["Runtime", a.runtime]);
  rows.push(["Network", a.egress && a.egress.length ? a.egress.join(", ") : "none"]);
  document.getElementById("facts").replaceChildren(...rows.map(([name, value]) =>
    el("li", { "data-fact": name.toLowerCase().replace(/ /g, "-") }, el("span", { class: "label" }, name), " ", value)));
  updateButtons();
}

function renderInstructions() {
  const box = document.getElementById("instructions");
  // Rendered and sanitised by the server; parsed inert and inserted as nodes, as notebook cells are.
  if (assignment.instructions_html) box.replaceChildren(...markdownNodes(assignment.instructions_html));
  else box.replaceChildren(el("p", { class: "muted" }, "No instructions."));
}

function renderDatasets() {
  const datasets = assignment.datasets || [];
  document.getElementById("datasets-panel").hidden = !datasets.length;
  document.getElementById("datasets").replaceChildren(...datasets.map((d) =>
    el("li", {}, el("code", {}, `/input/${d.name}`))));
}

function renderTests() {
  const tests = assignment.tests || [];
  const list = document.getElementById("tests");
  list.replaceChildren(...tests.map((test) => {
    const spec = testSpec(test);
    const item = el("li", { class: "test-spec-item", "data-visibility": test.visibility },
      el("div", { class: "test-head" }, el("span", { class: "test-name" }, test.name),
        el("span", { class: "muted" }, points(test.points)), visibilityMark(test)));
    if (spec.length) item.append(el("div", { class: "test-spec" }, ...spec));
    else {
      const why = test.visibility === "hidden" ? "You will see whether it passed, not what it runs."
        : "Its input and expected output are shown after the due date.";
      item.append(el("p", { class: "muted small" }, why));
    }
    return item;
  }));
  if (!tests.length) list.replaceChildren(el("li", { class: "muted" }, "This assignment has no tests yet."));
}

// --- Run and Submit ---------------------------------------------------------------------------

function submitBlocked() {
  const a = assignment;
  if (!a) return "loading…";
  if (a.opens_at && !isPast(a.opens_at) && !staff) return "not open yet";
  if (pastDue() && !a.accept_late && !lateDaysMayCover()) return "the due date has passed";
  if (a.attempts_allowed && mine() && mine().attempts_left <= 0) return "no attempts left";
  return null;
}

function updateButtons() {
  runButton.disabled = starting || runView.active || !editor;
  const blocked = submitBlocked();
  submitButton.disabled = submitting || Boolean(blocked) || !editor;
  const note = document.getElementById("submit-note");
  if (blocked) note.textContent = `Submit: ${blocked}.`;
  else if (pastDue() && lateDaysMayCover()) note.textContent = `The due time has passed: submitting spends late days (${lateDays().text}).`;
  else if (assignment.attempts_allowed && mine()) {
    const left = mine().attempts_left;
    note.textContent = `Submitting uses one of your ${left} attempt${left === 1 ? "" : "s"} left (unless grading fails on our side).`;
  } else note.textContent = "";
}

function argLines() {
  return document.getElementById("args").value.split("\n").filter((line) => line !== "");
}

async function run() {
  if (starting || runView.active) return;
  starting = true;
  updateButtons();
  runView.say("starting…");
  try {
    const body = { code: code(), stdin: document.getElementById("stdin").value, args: argLines() };
    const started = await api("POST", `/assignments/${assignmentId}/try`, body);
    const done = runView.follow(started.id);
    starting = false;
    updateButtons();
    await done;
  } catch (error) {
    runView.say(`not started: ${error.message}`);
  } finally {
    starting = false;
    updateButtons();
  }
}

async function submit() {
  if (submitting) return;
  submitting = true;
  updateButtons();
  message("");
  try {
    const created = await api("POST", `/assignments/${assignmentId}/submissions`, { code: code() });
    showCurrent(created);
    await refreshHistory();
    track(created.id);
  } catch (error) {
    message(`not submitted: ${error.message}`);
  } finally {
    submitting = false;
    updateButtons();
  }
}

// --- the latest submission, followed while it is graded; the history ----------------------

function showCurrent(submission) {
  document.getElementById("current-panel").hidden = false;
  document.getElementById("current").replaceChildren(view(submission, { staff, link: true }));
}

async function track(id) {
  followed += 1;
  const mine = followed;
  try {
    const final = await follow(id, showCurrent, {
      isCurrent: () => mine === followed,
      onRetry: (error) => message(`reconnecting… (${error.message})`),
    });
    if (!final) return;
    message("");
    assignment = await api("GET", `/assignments/${assignmentId}`);  // attempts left, score
    renderFacts();
    renderTests();  // after the due date, tests shown after it appear
    await refreshHistory();
  } catch (error) {
    if (mine === followed) message(`grading could not be followed: ${error.message}`);
  }
}

function historyItem(submission) {
  const body = el("div", { class: "history-body" });
  const details = el("details", { "data-id": submission.id },
    el("summary", {}, facts(submission), submission.note ? el("span", { class: "note" }, ` — ${submission.note}`) : null),
    body);
  details.addEventListener("toggle", async () => {
    if (!details.open || body.dataset.loaded) return;
    body.replaceChildren(el("p", { class: "muted" }, "loading…"));
    try {
      const full = await api("GET", `/submissions/${submission.id}`);
      body.replaceChildren(view(full, { staff, link: true }));
      body.dataset.loaded = FINAL.has(full.state) ? "1" : "";
    } catch (error) {
      body.replaceChildren(el("p", { class: "error" }, `not loaded: ${error.message}`));
    }
  });
  return el("li", { class: "history-item", "data-state": submission.state }, details);
}

// The viewer's own submissions, newest first (staff see everyone's through the API: only theirs here).
async function refreshHistory() {
  const query = staff ? `?student=${encodeURIComponent(username)}` : "";
  const found = await api("GET", `/assignments/${assignmentId}/submissions${query}`);
  const list = found.filter((s) => !staff || s.student === username)
    .sort((a, b) => new Date(b.created_at) - new Date(a.created_at));
  const history = document.getElementById("history");
  history.replaceChildren(...list.map(historyItem));
  if (!list.length) history.replaceChildren(el("li", { class: "muted empty" }, "No submissions yet."));
  return list;
}

// --- start ------------------------------------------------------------------------------------

async function start() {
  assignment = await api("GET", `/assignments/${assignmentId}`);
  renderFacts();
  renderInstructions();
  renderDatasets();
  renderTests();
  const history = await refreshHistory();
  let seed = assignment.starter_code || "";
  const latest = history[0];
  if (latest) {
    const full = await api("GET", `/submissions/${latest.id}`);
    seed = full.code;
    showCurrent(full);
    if (!FINAL.has(full.state)) track(full.id);
  }
  editor = CordonEditor.create(document.getElementById("editor"), {
    doc: seed, language: assignment.runtime, label: "your code", onRun: run, onChange: () => {},
  });
  runButton.addEventListener("click", run);
  submitButton.addEventListener("click", submit);
  updateButtons();
  root.dataset.ready = "true";
}

start().catch((error) => message(`this assignment could not be loaded: ${error.message}`));
