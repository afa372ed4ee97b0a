// A graded submission as nodes (its score, state, whether it counted as an attempt, and each test's
// result), followed until it is graded: the submission page shows one, the assignment page its
// submissions. What a test shows is what the API sent: a hidden test's result comes without its
// input or expected output.

import { api, el } from "../cordon.js";
import { formatScore, formatWhen, known, points } from "../format.js";

export const FINAL = new Set(["graded", "not_graded"]);
const POLL_MS = 1000;
const RETRY_MAX_MS = 10000;
const STATE_WORDS = { queued: "waiting to be graded", grading: "being graded", graded: "graded",
  not_graded: "not graded" };
const VISIBILITY_WORDS = { visible: "visible", hidden: "hidden", after_due: "shown after the due date" };

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// passed, failed, pending or not-graded: how a status is coloured (a run outcome is a failure).
function statusKind(status) {
  if (status === "passed") return "passed";
  if (["pending", "running", "checking"].includes(status)) return "pending";
  if (status === "not_graded") return "not-graded";
  return "failed";
}

function chargedText(charged) {
  if (charged === true) return "counted as an attempt";
  if (charged === false) return "not counted as an attempt";
  return "not counted yet";
}

// One line about a submission (also a history entry's summary; no code, no tests needed).
export function facts(submission) {
  const adjusted = Boolean(submission.adjustment) && known(submission.final_score);
  const score = adjusted ? submission.final_score : submission.score;
  const parts = [
    el("span", { class: "score", "aria-label": "score" }, formatScore(score, submission.max_score)),
    el("span", { class: `state state-${submission.state}` }, STATE_WORDS[submission.state] || submission.state),
  ];
  if (submission.attempt) parts.push(el("span", {}, `attempt ${submission.attempt}`));
  parts.push(el("span", { class: "when" }, formatWhen(submission.created_at)));
  if (adjusted) {
    const sign = submission.adjustment > 0 ? "+" : "−";
    parts.push(el("span", { class: "adjusted" }, `tests ${+Number(submission.score).toFixed(2)} ${sign} ${+Math.abs(submission.adjustment).toFixed(2)} by hand`));
  }
  if (submission.late) parts.push(el("span", { class: "late" }, "late"));
  else if (submission.late_days) {
    parts.push(el("span", { class: "late-days" }, `${submission.late_days} late day${submission.late_days === 1 ? "" : "s"} spent`));
  } else parts.push(el("span", {}, "on time"));
  parts.push(el("span", { class: "charged" }, chargedText(submission.charged)));
  const line = el("span", { class: "submission-facts" });
  parts.forEach((part, index) => { if (index) line.append(" · "); line.append(part); });
  return line;
}

function labelled(label, node) {
  return el("div", { class: "labelled" }, el("span", { class: "label" }, label), node);
}

const MATCH_WORDS = { exact: "exactly", strip: "ignoring spaces at line ends and blank lines at the end", regex: "as a regular expression" };

// What a test feeds the program and expects, as far as the viewer may see it (the API sends null
// for what they may not: a hidden test's stdin, args and expectation).
export function testSpec(test) {
  const parts = [];
  if (known(test.stdin)) parts.push(labelled("stdin", el("pre", { class: "io" }, test.stdin)));
  if (known(test.args) && test.args.length) parts.push(labelled("arguments", el("pre", { class: "io" }, test.args.join("\n"))));
  if (known(test.expected_stdout)) {
    const how = test.match ? ` (${MATCH_WORDS[test.match] || test.match})` : "";
    parts.push(labelled(`expected stdout${how}`, el("pre", { class: "io" }, test.expected_stdout)));
  }
  if (test.check_code) {
    parts.push(labelled(`check program${test.check_runtime ? ` (${test.check_runtime})` : ""}`,
      el("pre", { class: "io" }, test.check_code)));
  }
  return parts;
}

// A diff's lines, those of the expected output (-) and of the output got (+) marked.
function diffView(diff) {
  const pre = el("pre", { class: "diff" });
  for (const line of diff.split("\n")) {
    const kind = line.startsWith("+") && !line.startsWith("+++") ? "got"
      : line.startsWith("-") && !line.startsWith("---") ? "expected" : null;
    pre.append(el("span", { class: kind ? `diff-${kind}` : null }, line), "\n");
  }
  return pre;
}

export function visibilityMark(test) {
  if (test.visibility === "visible") return null;
  return el("span", { class: "visibility" }, VISIBILITY_WORDS[test.visibility] || test.visibility);
}

function resultItem(test, { staff = false } = {}) {
  const status = test.status;
  const scored = known(test.score);
  const worth = scored ? `${+Number(test.score).toFixed(2)} of ${points(test.points)}` : points(test.points);
  const item = el("li", { class: "test-result", "data-status": status, "data-visibility": test.visibility },
    el("div", { class: "test-head" },
      el("span", { class: `status status-${statusKind(status)}` }, test.status_text || status),
      el("span", { class: "test-name" }, test.name), el("span", { class: "muted" }, worth), visibilityMark(test)));
  if (test.detail && test.detail !== test.status_text) item.append(el("p", { class: "detail" }, test.detail));
  if (test.diff) item.append(labelled("expected (-) and got (+)", diffView(test.diff)));
  if (test.feedback) item.append(labelled("feedback", el("pre", { class: "io feedback" }, test.feedback)));
  // The student's own error on a test they may see (the end of their program's stderr: a traceback).
  if (test.stderr_tail) item.append(labelled("your program's error output (its end)", el("pre", { class: "io stderr-tail" }, test.stderr_tail)));
  // The staff: what the program wrote on every test, hidden ones too.
  if (staff && (known(test.stdout) || known(test.stderr))) {
    item.append(el("details", { class: "test-streams" }, el("summary", {}, "What the program wrote"),
      labelled("stdout", el("pre", { class: "io" }, test.stdout || "(nothing)")),
      labelled("stderr", el("pre", { class: "io stderr" }, test.stderr || "(nothing)"))));
  }
  const spec = testSpec(test);
  if (spec.length) item.append(el("details", { class: "test-spec" }, el("summary", {}, "Input and expected output"), ...spec));
  if (staff && (test.run_id || test.check_run_id)) {
    item.append(el("p", { class: "small run-links" },
      test.run_id ? el("a", { href: `/runs/${test.run_id}/` }, "test run") : null,
      test.run_id && test.check_run_id ? " · " : null,
      test.check_run_id ? el("a", { href: `/runs/${test.check_run_id}/` }, "check run") : null));
  }
  return item;
}

// About how long: "about 40 s", "about 3 min".
function roughly(seconds) {
  if (seconds < 90) return `about ${Math.max(5, Math.round(seconds / 5) * 5)} s`;
  return `about ${Math.round(seconds / 60)} min`;
}

// Its place in the grading queue, while it waits (from the queue's own state).
function queueLine(queue) {
  const place = queue.place === 1 ? "next in line" : `${queue.place}${ordinal(queue.place)} in line`;
  return el("p", { class: "queue", "data-place": queue.place },
    `Waiting for grading: ${place} (${queue.runs_ahead} test run${queue.runs_ahead === 1 ? "" : "s"} ahead), graded in ${roughly(queue.estimate_s)}.`);
}

function ordinal(n) {
  if (n % 100 >= 11 && n % 100 <= 13) return "th";
  return { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
}

// The staff's adjustments: points and the comment why, who and when (a withdrawn one struck through).
function adjustmentsList(adjustments, { onWithdraw = null } = {}) {
  return el("ul", { class: "adjustments" }, ...adjustments.map((a) => {
    const withdrawn = Boolean(a.withdrawn_at);
    const item = el("li", { class: withdrawn ? "withdrawn" : null, "data-adjustment": a.id },
      el("span", { class: "points" }, `${a.points > 0 ? "+" : "−"}${+Math.abs(a.points).toFixed(2)}`), " ",
      el("span", { class: "comment" }, a.comment), " ",
      el("span", { class: "muted small" }, `${a.by}, ${formatWhen(a.at)}${withdrawn ? ` · withdrawn by ${a.withdrawn_by}` : ""}`));
    if (onWithdraw && !withdrawn) {
      item.append(" ", el("button", { type: "button", class: "link-button", onclick: () => onWithdraw(a) }, "Withdraw"));
    }
    return item;
  }));
}

// A whole submission: its facts and note, each test's result, and (`link`) its own page.
export function view(submission, { staff = false, link = false, onWithdraw = null } = {}) {
  const node = el("div", { class: "submission", "data-state": submission.state, "data-id": submission.id },
    el("p", {}, facts(submission)));
  if (submission.queue) node.append(queueLine(submission.queue));
  if (submission.note) node.append(el("p", { class: "note" }, submission.note));
  const adjustments = submission.adjustments || [];
  if (adjustments.length) {
    node.append(el("h3", {}, "Adjusted by hand"), adjustmentsList(adjustments, { onWithdraw: staff ? onWithdraw : null }));
  }
  const tests = submission.tests || [];
  if (tests.length) node.append(el("ul", { class: "test-list results" }, ...tests.map((t) => resultItem(t, { staff }))));
  if (link) node.append(el("p", { class: "small" }, el("a", { href: `/submissions/${submission.id}/` }, "Open this submission")));
  return node;
}

// Reads submission `id` every second, calling onUpdate with each answer, until it is graded or not
// graded (resolves with it) or isCurrent() says the page stopped caring (resolves with null). A
// failed read is tried again, more slowly; a 404 is thrown.
export async function follow(id, onUpdate, { isCurrent = () => true, onRetry = () => {} } = {}) {
  let wait = POLL_MS;
  for (;;) {
    let submission;
    try {
      submission = await api("GET", `/submissions/${id}`);
      wait = POLL_MS;
    } catch (error) {
      if (error.status === 404 || !isCurrent()) throw error;
      onRetry(error);
      wait = Math.min(wait * 2, RETRY_MAX_MS);
      await sleep(wait);
      continue;
    }
    if (!isCurrent()) return null;
    onUpdate(submission);
    if (FINAL.has(submission.state)) return submission;
    await sleep(wait);
  }
}
