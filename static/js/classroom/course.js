// One course's page (templates/classroom/course.html): its assignments (a student's scores and
// attempts); for its staff the gradebook, joining, members and invitations, datasets; for its
// instructors the controls (roles, join code, roster import, policy, regrading).
import { api, el, message } from "../cordon.js";
import { formatScore, formatWhen } from "../format.js";
import { setUpDatasetUpload, loadDatasets } from "./course_datasets.js";
import { loadGradebook } from "./course_gradebook.js";
import { joinCode, loadInvitations, loadMembers, renderJoin, setUpRoster } from "./course_members.js";
import { setUpPolicy } from "./course_policy.js";
import { emptyRow } from "./courses_shared.js";

// Assignments: a student's score and attempts; for staff, dates and actions.
async function loadAssignments(page) {
  const assignments = await api("GET", `${page.base}/assignments`);
  const tbody = document.querySelector("#assignments tbody");
  tbody.replaceChildren(...assignments.map((a) => (page.staff ? staffRow(page, a) : studentRow(page, a))));
  if (!assignments.length) {
    tbody.replaceChildren(emptyRow(7, page.staff ? "No assignments yet." : "No assignments open yet."));
  }
}

function due(a) {
  if (!a.due_at) return "no due date";
  const past = new Date(a.due_at) <= new Date();
  return `${formatWhen(a.due_at)}${past ? (a.accept_late ? " (past; late accepted)" : " (past)") : ""}`;
}

// A student who has not submitted may have no `my` yet: none used.
function mine(a, staff) {
  return a.my || (staff ? null : { attempts_used: 0, attempts_left: a.attempts_allowed, score: null });
}

function attempts(a, staff) {
  const my = mine(a, staff);
  if (!a.attempts_allowed) return my ? `${my.attempts_used} used (unlimited)` : "unlimited";
  return my ? `${my.attempts_used} used, ${my.attempts_left} left` : `${a.attempts_allowed} allowed`;
}

function studentRow(page, a) {
  const my = a.my;
  let score = formatScore(my ? my.score : null, a.max_score);
  if (my && my.state && my.state !== "graded") score += ` (${my.state.replace("_", " ")})`;
  if (my && my.late) score += " late";
  return el("tr", { "data-id": a.id },
    el("td", {}, el("a", { href: `/assignments/${a.id}/` }, a.title)),
    el("td", {}, a.runtime), el("td", {}, due(a)),
    el("td", { class: "num" },
      my && my.submission_id ? el("a", { href: `/submissions/${my.submission_id}/` }, score) : score),
    el("td", {}, attempts(a, page.staff)));
}

function staffRow(page, a) {
  const actions = el("td", { class: "actions" });
  if (page.instructor) {
    actions.append(
      el("a", { class: "button", href: `/assignments/${a.id}/edit/`, "aria-label": `edit ${a.title}` }, "Edit"),
      " ", el("button", { type: "button", "aria-label": `regrade every submission of ${a.title}`,
        onclick: () => regrade(page, a) }, "Regrade all"));
  }
  const opens = a.opens_at ? formatWhen(a.opens_at) : "open";
  return el("tr", { "data-id": a.id, "data-published": String(a.published) },
    el("td", {}, el("a", { href: `/assignments/${a.id}/` }, a.title),
      a.published ? "" : el("span", { class: "draft-mark" }, " draft")),
    el("td", {}, a.runtime), el("td", {}, due(a)), el("td", {}, opens),
    el("td", { class: "num" }, String(+Number(a.max_score).toFixed(2))),
    el("td", {}, a.attempts_allowed ? String(a.attempts_allowed) : "unlimited"), actions);
}

async function regrade(page, a) {
  if (!confirm(`Regrade every submission of "${a.title}" with its current tests? Scores may change.`)) return;
  try {
    const answer = await api("POST", `/assignments/${a.id}/regrade`);
    message(`${a.title}: regrading ${answer.regrading} submission${answer.regrading === 1 ? "" : "s"}.`);
    loadGradebook(page);
  } catch (error) { message(`${a.title} not regraded: ${error.message}`); }
}

// What the page's parts share: `course` is the course as the API last said it (a change of its
// join code or policy answers with it whole).
async function coursePage(root) {
  const role = root.dataset.role;
  const base = `/courses/${root.dataset.courseId}`;
  const page = { root, base, staff: role === "instructor" || role === "assistant", instructor: role === "instructor" };
  page.course = await api("GET", base);
  const work = [loadAssignments(page)];
  if (page.staff) {
    renderJoin(page);
    work.push(loadGradebook(page), loadMembers(page), loadInvitations(page), loadDatasets(page));
    setUpDatasetUpload(page);
  }
  if (page.instructor) {
    document.getElementById("rotate-code").addEventListener("click", () => joinCode(page, "rotate"));
    document.getElementById("close-code").addEventListener("click", () => joinCode(page, "close"));
    setUpRoster(page);
    work.push(setUpPolicy(page));
  }
  await Promise.all(work);
}

const courseRoot = document.getElementById("course");
coursePage(courseRoot).then(() => { courseRoot.dataset.ready = "true"; })
  .catch((error) => message(`this page could not be loaded: ${error.message}`));
