// Publishing an assignment, after a confirmation that lists what students will see (the dialog of
// templates/classroom/_publish_dialog.html): from its page and from its editor, the same steps.

import { api, el } from "../cordon.js";
import { formatWhen } from "../format.js";

function listed(label, names) {
  return el("li", {}, el("strong", {}, `${label}: `), names.length ? names.join(", ") : "none");
}

let pending = null;  // the publishing the open dialog would confirm: {assignmentId, done, failed}

// Opens the confirmation for the assignment as saved; on Publish, publishes it and calls
// `done()`; a refusal goes to `failed(error)`.
export async function confirmPublish(assignmentId, { done, failed }) {
  const p = await api("GET", `/assignments/${assignmentId}/publication`);
  const dialog = document.getElementById("publish-dialog");
  document.getElementById("publish-list").replaceChildren(
    el("li", {}, el("strong", {}, "Title: "), p.title, ` (${p.runtime})`),
    el("li", {}, el("strong", {}, "Seen: "), p.visible_now ? "at once" : `from ${formatWhen(p.opens_at)}`),
    el("li", {}, el("strong", {}, "Due: "), p.due_at ? formatWhen(p.due_at) : "no due date"),
    el("li", {}, el("strong", {}, "Instructions and starter code: "), `${p.instructions_bytes} bytes, ${p.starter_code_lines} lines`),
    listed("Datasets, readable by their runs", p.datasets),
    listed("Tests shown in full (input and expected output)", p.tests_with_details),
    listed("Tests shown once their due time has passed", p.tests_after_due),
    listed("Tests shown by name, points and pass/fail only", p.tests_name_and_points_only),
    el("li", {}, el("strong", {}, "Attempts: "), p.attempts_allowed ? String(p.attempts_allowed) : "unlimited",
      p.accept_late ? "; late work accepted" : "; late work refused"),
  );
  pending = { assignmentId, done, failed };
  dialog.showModal();
}

async function publish() {
  const asked = pending;
  if (!asked) return;
  try {
    await api("POST", `/assignments/${asked.assignmentId}/publish`, { confirm: true });
    document.getElementById("publish-dialog").close();
    pending = null;
    await asked.done();
  } catch (error) { asked.failed(error); }
}

// The dialog's buttons, once per page.
export function wirePublishDialog() {
  document.getElementById("publish-confirm").addEventListener("click", publish);
  document.getElementById("publish-cancel").addEventListener("click", () => {
    pending = null;
    document.getElementById("publish-dialog").close();
  });
}
