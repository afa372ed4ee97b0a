// One student of a course, for its staff: every attempt at every assignment, oldest first, with
// its score (the tests' and the final one), lateness and late days, and the scores over time as a
// small chart per assignment; each attempt opens its submission.

import { api, el } from "../cordon.js";
import { formatScore, formatWhen } from "../format.js";

const root = document.getElementById("student-record");
const SVG = "http://www.w3.org/2000/svg";

function svg(name, attributes) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  return node;
}

// Final scores over the attempts, as a line on a 0..max scale (drawn when there are two or more).
function chart(assignment) {
  const scored = assignment.attempts.filter((a) => a.final_score !== null);
  if (scored.length < 2 || !assignment.max_score) return null;
  const width = 240;
  const height = 48;
  const x = (i) => 6 + (i * (width - 12)) / (scored.length - 1);
  const y = (score) => height - 6 - (Math.min(score, assignment.max_score) / assignment.max_score) * (height - 12);
  const points = scored.map((a, i) => `${x(i).toFixed(1)},${y(a.final_score).toFixed(1)}`).join(" ");
  const box = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "score-chart",
    "aria-label": `scores over ${scored.length} attempts: ${scored.map((a) => a.final_score).join(", ")}` });
  box.append(svg("polyline", { points, fill: "none", stroke: "currentColor", "stroke-width": 2 }));
  scored.forEach((a, i) => box.append(svg("circle", { cx: x(i), cy: y(a.final_score), r: 3, fill: "currentColor" })));
  return box;
}

function attemptRow(attempt, assignment) {
  const facts = [attempt.state.replace("_", " ")];
  if (attempt.late) facts.push("late");
  if (attempt.late_days) facts.push(`${attempt.late_days} late day${attempt.late_days === 1 ? "" : "s"}`);
  const adjusted = attempt.final_score !== attempt.score && attempt.final_score !== null;
  return el("tr", { "data-submission": attempt.id },
    el("td", {}, attempt.attempt ? `#${attempt.attempt}` : "not counted"),
    el("td", {}, el("a", { href: `/submissions/${attempt.id}/` }, formatWhen(attempt.created_at))),
    el("td", { class: "num" }, formatScore(attempt.final_score, assignment.max_score),
      adjusted ? el("span", { class: "muted small" }, ` (tests ${attempt.score})`) : ""),
    el("td", {}, facts.join(" · ")));
}

function section(assignment) {
  const head = el("h2", {}, el("a", { href: `/assignments/${assignment.id}/` }, assignment.title),
    assignment.published ? "" : el("span", { class: "draft-mark" }, " draft"));
  const due = assignment.due_at ? `due ${formatWhen(assignment.due_at)}${assignment.extended ? " (extension)" : ""}` : "no due date";
  const spent = assignment.late_days ? ` · ${assignment.late_days} late day${assignment.late_days === 1 ? "" : "s"} spent` : "";
  const box = el("section", { class: "panel", id: `assignment-${assignment.id}` }, head, el("p", { class: "muted small" }, due + spent));
  if (!assignment.attempts.length) {
    box.append(el("p", { class: "muted" }, "No attempts."));
    return box;
  }
  const graph = chart(assignment);
  if (graph) box.append(graph);
  box.append(el("div", { class: "grid-box" }, el("table", { class: "table attempts" },
    el("thead", {}, el("tr", {}, ...["Attempt", "Submitted", "Score", "State"].map((t) => el("th", { scope: "col" }, t)))),
    el("tbody", {}, ...assignment.attempts.map((a) => attemptRow(a, assignment))))));
  return box;
}

async function start() {
  const record = await api("GET", `/courses/${root.dataset.courseId}/students/${encodeURIComponent(root.dataset.username)}`);
  const days = record.late_days;
  document.getElementById("late-days").textContent = days.allowed
    ? `${days.used} late day${days.used === 1 ? "" : "s"} used, ${days.left} left (of ${days.allowed}).` : "";
  document.getElementById("assignments").replaceChildren(...record.assignments.map(section));
  if (window.location.hash) document.getElementById(window.location.hash.slice(1))?.scrollIntoView();
  root.dataset.ready = "true";
}

start().catch((error) => { document.getElementById("message").textContent = `could not be loaded: ${error.message}`; });
