// The staff's part of an assignment page: publishing a draft (after a confirmation that lists what
// students will see), per-student extensions, the rubric of reusable adjustments, and the
// similarity report (made in the background; its progress shown as it goes).

import { api, el } from "../cordon.js";
import { formatWhen } from "../format.js";
import { confirmPublish, wirePublishDialog } from "./publishing.js";

const root = document.getElementById("assignment");
const assignmentId = root.dataset.assignmentId;
const instructor = root.dataset.instructor === "true";
const say = (id, text) => { document.getElementById(id).textContent = text; };
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// --- publishing -------------------------------------------------------------------------------

async function renderPublishing() {
  const box = document.getElementById("publishing");
  const a = await api("GET", `/assignments/${assignmentId}`);
  if (a.published) {
    box.replaceChildren(el("p", {}, `Published ${formatWhen(a.published_at)}: students see it${a.opens_at ? ` from ${formatWhen(a.opens_at)}` : ""}.`));
    if (instructor) {
      box.append(el("p", {}, el("button", { type: "button", id: "unpublish", onclick: unpublish }, "Back to draft")),
        el("p", { class: "muted small" }, "Only while no student has submitted."));
    }
    return;
  }
  box.replaceChildren(el("p", { class: "draft-mark" }, "Draft: no student sees this assignment, its tests or a dataset only it uses."));
  const published = async () => { await renderPublishing(); say("staff-message", "Published."); };
  const asked = () => confirmPublish(assignmentId, { done: published, failed: (error) => say("staff-message", `not published: ${error.message}`) });
  if (instructor) box.append(el("p", {}, el("button", { type: "button", id: "publish", class: "primary", onclick: asked }, "Publish…")));
}

async function unpublish() {
  try {
    await api("POST", `/assignments/${assignmentId}/unpublish`);
    await renderPublishing();
  } catch (error) { say("staff-message", `still published: ${error.message}`); }
}

// --- extensions -------------------------------------------------------------------------------

async function renderExtensions() {
  const found = await api("GET", `/assignments/${assignmentId}/extensions`);
  const list = document.getElementById("extensions");
  list.replaceChildren(...found.map((e) => el("li", { "data-student": e.student },
    el("strong", {}, e.student), ` until ${formatWhen(e.due_at)}`, e.reason ? ` (${e.reason})` : "",
    el("span", { class: "muted small" }, ` · by ${e.granted_by || "?"}`), " ",
    el("button", { type: "button", class: "link-button", onclick: () => removeExtension(e.student) }, "Remove"))));
  if (!found.length) list.replaceChildren(el("li", { class: "muted" }, "No extensions."));
}

async function grantExtension(event) {
  event.preventDefault();
  const form = event.target;
  const when = form.elements.due_at.value;
  try {
    await api("PUT", `/assignments/${assignmentId}/extensions`, {
      student: form.elements.student.value.trim(), due_at: when ? new Date(when).toISOString() : "",
      reason: form.elements.reason.value.trim(),
    });
    form.reset();
    await renderExtensions();
  } catch (error) { say("staff-message", `no extension: ${error.message}`); }
}

async function removeExtension(student) {
  await api("DELETE", `/assignments/${assignmentId}/extensions/${encodeURIComponent(student)}`);
  await renderExtensions();
}

// --- the rubric -------------------------------------------------------------------------------

// One item a line: "points label", e.g. "-1 no comments" or "+2 extra tests".
function parseRubric(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
    const match = /^([+-]?\d+(?:\.\d+)?)\s+(.+)$/.exec(line);
    if (!match) throw new Error(`"${line}": write the points first, then the label`);
    return { points: Number(match[1]), label: match[2] };
  });
}

async function saveRubric(event) {
  event.preventDefault();
  try {
    const items = await api("PUT", `/assignments/${assignmentId}/rubric`, { items: parseRubric(event.target.elements.rubric.value) });
    say("staff-message", `Rubric saved: ${items.length} item${items.length === 1 ? "" : "s"}.`);
  } catch (error) { say("staff-message", `rubric not saved: ${error.message}`); }
}

async function loadRubric() {
  const a = await api("GET", `/assignments/${assignmentId}`);
  document.getElementById("rubric").value = (a.rubric || []).map((r) => `${r.points > 0 ? "+" : ""}${r.points} ${r.label}`).join("\n");
}

// --- similarity -------------------------------------------------------------------------------

function renderReport(report) {
  const box = document.getElementById("similarity");
  const pct = (x) => `${Math.round(x * 100)}%`;
  const head = el("p", { "data-state": report.state },
    report.state === "done"
      ? `${report.pairs.length} pair${report.pairs.length === 1 ? "" : "s"} at or above ${pct(report.threshold)} among ${report.submissions} students' latest submissions (${formatWhen(report.finished_at)}).`
      : report.state === "failed" ? `The report failed: ${report.error}`
        : `Comparing ${report.submissions || "the"} latest submissions… step ${report.done} of ${report.total || "?"}.`);
  const progress = report.state === "running" || report.state === "queued"
    ? el("progress", { max: report.total || 1, value: report.done }) : null;
  const pairs = (report.pairs || []).map((pair, index) => el("li", { "data-pair": index },
    el("a", { href: `/similarity/${report.id}/pairs/${index}/` }, `${pair.a.student} and ${pair.b.student}`),
    ` · ${pct(pair.similarity)} (${pct(pair.a.share)} of ${pair.a.student}'s, ${pct(pair.b.share)} of ${pair.b.student}'s)`));
  box.replaceChildren(head, progress || "", el("ol", { class: "pairs" }, ...pairs));
}

async function followReport(id) {
  for (;;) {
    const report = await api("GET", `/similarity/${id}`);
    renderReport(report);
    if (report.state === "done" || report.state === "failed") return;
    await sleep(1000);
  }
}

async function runSimilarity() {
  try {
    const report = await api("POST", `/assignments/${assignmentId}/similarity`, {});
    await followReport(report.id);
  } catch (error) { say("staff-message", `no report: ${error.message}`); }
}

async function lastReport() {
  const reports = await api("GET", `/assignments/${assignmentId}/similarity`);
  if (reports.length) await followReport(reports[0].id);
}

// --- start --------------------------------------------------------------------------------------

wirePublishDialog();
document.getElementById("extension-form").addEventListener("submit", grantExtension);
document.getElementById("run-similarity").addEventListener("click", runSimilarity);
if (instructor) document.getElementById("rubric-form").addEventListener("submit", saveRubric);
Promise.all([renderPublishing(), renderExtensions(), instructor ? loadRubric() : null, lastReport()])
  .then(() => { document.getElementById("staff-panel").dataset.ready = "true"; })
  .catch((error) => say("staff-message", `could not be loaded: ${error.message}`));
