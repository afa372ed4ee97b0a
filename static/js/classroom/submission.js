// The submission page: the submission's result (followed until graded) and its code; for staff, a
// form that adds points or takes them away with a comment (or a rubric item of the assignment's).

import { api, el } from "../cordon.js";
import { follow, view } from "./submission_view.js";

const root = document.getElementById("submission");
const staff = root.dataset.staff === "true";
const id = root.dataset.submissionId;
const result = document.getElementById("result");
const code = document.getElementById("code");
const message = document.getElementById("message");

function show(submission) {
  message.textContent = "";
  result.replaceChildren(view(submission, { staff, onWithdraw: withdraw }));
  code.textContent = submission.code;
  const form = document.getElementById("adjust-form");
  if (form) form.hidden = submission.state !== "graded";
}

async function reload() { show(await api("GET", `/submissions/${id}`)); }

async function withdraw(adjustment) {
  if (!window.confirm(`Withdraw "${adjustment.comment}" (${adjustment.points} points)?`)) return;
  try {
    await api("DELETE", `/submissions/${id}/adjustments/${adjustment.id}`);
    await reload();
  } catch (error) { message.textContent = `not withdrawn: ${error.message}`; }
}

async function adjust(event) {
  event.preventDefault();
  const form = event.target;
  const item = form.elements.rubric.value;
  const points = form.elements.points.value.trim();
  const body = { comment: form.elements.comment.value.trim() };
  if (points) body.points = Number(points);
  if (item) body.rubric_item_id = Number(item);
  try {
    await api("POST", `/submissions/${id}/adjustments`, body);
    form.reset();
    await reload();
    message.textContent = "Adjusted: the student sees the points and your comment.";
  } catch (error) { message.textContent = `not adjusted: ${error.message}`; }
}

async function rubricChoices() {
  const select = document.getElementById("adjust-rubric");
  const assignment = await api("GET", `/assignments/${root.dataset.assignmentId}`);
  select.replaceChildren(el("option", { value: "" }, "none (your own points and comment)"),
    ...(assignment.rubric || []).map((r) => el("option", { value: r.id }, `${r.points > 0 ? "+" : ""}${r.points}: ${r.label}`)));
}

if (staff) {
  document.getElementById("adjust-form").addEventListener("submit", adjust);
  rubricChoices().catch((error) => { message.textContent = `the rubric could not be loaded: ${error.message}`; });
}

follow(id, show, { onRetry: (error) => { message.textContent = `reconnecting… (${error.message})`; } })
  .then(() => { root.dataset.ready = "true"; })
  .catch((error) => { message.textContent = `this submission could not be loaded: ${error.message}`; });
