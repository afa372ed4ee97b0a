// A course's gradebook, for its staff: students × assignments, each cell the student's latest
// submission (its score, state, adjustments, lateness and attempts).
import { api, el } from "../cordon.js";
import { formatScore } from "../format.js";
import { emptyRow } from "./courses_shared.js";

// The gradebook: students × assignments, each cell the latest submission.
export async function loadGradebook(page) {
  const book = await api("GET", `${page.base}/gradebook`);
  const course = page.course;
  const grid = document.getElementById("gradebook");
  const head = el("tr", {}, el("th", { scope: "col" }, "Student"),
    ...book.assignments.map((a) => el("th", { scope: "col" }, el("a", { href: `/assignments/${a.id}/` }, a.title),
      el("span", { class: "col-type" }, `of ${+Number(a.max_score).toFixed(2)}${a.published ? "" : " · draft"}`))),
    el("th", { scope: "col", class: "num" }, "Total"));
  const maxTotal = book.assignments.reduce((sum, a) => sum + Number(a.max_score || 0), 0);
  const rows = book.students.map((student) => {
    let total = 0;
    const cells = student.cells.map((cell, index) => {
      const a = book.assignments[index];
      if (!cell) return el("td", { class: "cell-empty muted", "data-assignment": a.id }, "–");
      total += Number(cell.score || 0);
      const score = formatScore(cell.score, a.max_score);
      const facts = [];
      if (cell.state !== "graded") facts.push(cell.state.replace("_", " "));
      if (cell.adjustment) {
        facts.push(`${cell.adjustment > 0 ? "+" : "−"}${+Math.abs(cell.adjustment).toFixed(2)} by hand`);
      }
      if (cell.late) facts.push("late");
      if (cell.late_days) facts.push(`${cell.late_days} late day${cell.late_days === 1 ? "" : "s"}`);
      const record = `/courses/${course.id}/students/${encodeURIComponent(student.username)}/#assignment-${a.id}`;
      return el("td", { class: `cell state-${cell.state}`, "data-assignment": a.id },
        el("a", { href: `/submissions/${cell.submission_id}/`,
          "aria-label": `${student.username}, ${a.title}: ${score}` }, score),
        el("span", { class: "cell-facts" }, [...facts, ""].join(" · "),
          el("a", { href: record, class: "attempts-link" },
            `${cell.attempts} attempt${cell.attempts === 1 ? "" : "s"}`)));
    });
    const who = el("a", { href: `/courses/${course.id}/students/${encodeURIComponent(student.username)}/` },
      student.username);
    return el("tr", { "data-student": student.username }, el("th", { scope: "row" }, who), ...cells,
      el("td", { class: "num" }, formatScore(total, maxTotal)));
  });
  grid.replaceChildren(el("thead", {}, head),
    el("tbody", {}, ...(rows.length ? rows : [emptyRow(book.assignments.length + 2, "No students yet.")])));
}
