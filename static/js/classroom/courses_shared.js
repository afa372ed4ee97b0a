// What the courses list (courses.js) and a course's page (course.js) share: a form's refusal shown
// where it belongs, and the row a table shows when it has none.
import { el, message, showFieldError } from "../cordon.js";

// A form's failure: beside the field the API named, or in the page's message.
export function refused(form, error, what) {
  if (!showFieldError(form, error)) message(`${what}: ${error.message}`);
}

export function emptyRow(columns, text) {
  return el("tr", {}, el("td", { colspan: String(columns), class: "muted" }, text));
}
