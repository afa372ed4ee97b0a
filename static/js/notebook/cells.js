// The notebook's list of cells: adding, moving and deleting them (with undo), and an output used
// as an input of the next cell.
import { el, message } from "../cordon.js";
import { Cell } from "./cell.js";
import { select } from "./command.js";
import { changed } from "./saving.js";
import { cellList, page } from "./state.js";

const deleted = [];  // cells deleted here, newest last, for z (undo): {cell, index}
const UNDO_KEPT = 20;

export function newId() {
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

export function renumberAll() {
  page.cells.forEach((cell) => cell.renumber());
}

export function insertCell(index, data) {
  const cell = new Cell({ id: newId(), kind: "code", runtime: page.runtime, source: "", inputs: [], limits: {},
    ...data });
  page.cells.splice(index, 0, cell);
  cellList.insertBefore(cell.node, cellList.children[index] || null);
  renumberAll();
  changed();
  return cell;
}

// A new code cell takes the notebook's runtime (not the cell above's).
export function addCell(kind) {
  const index = page.cells.length;
  const cell = insertCell(index, { kind, runtime: page.runtime });
  if (kind === "markdown") cell.edit();
  cell.focus();
  return cell;
}

export function focusNext(cell) {
  const index = page.cells.indexOf(cell);
  const next = page.cells[index + 1] || insertCell(index + 1, { kind: "code", runtime: page.runtime });
  next.focus();
}

export function moveCell(cell, step) {
  const index = page.cells.indexOf(cell);
  const to = index + step;
  if (to < 0 || to >= page.cells.length) return;
  page.cells.splice(index, 1);
  page.cells.splice(to, 0, cell);
  cellList.replaceChildren(...page.cells.map((c) => c.node));
  renumberAll();
  changed();
  (step < 0 ? cell.upButton : cell.downButton).focus();
}

// A deleted cell is kept on the page (its editor, its run's view) until UNDO_KEPT newer deletions
// push it out: z in command mode, or the message's Undo, brings it back where it was; a save then
// gives it its last run again (the server checks that run is this notebook's run of that cell).
export function deleteCell(cell, { ask = true } = {}) {
  const worth = cell.data.source.trim() || cell.data.last_run_id;
  if (ask && worth && !confirm(`Delete cell ${cell.number}? Its runs stay under Runs.`)) return;
  const index = page.cells.indexOf(cell);
  page.cells.splice(index, 1);
  cell.node.remove();
  if (page.selected === cell) page.selected = null;
  deleted.push({ cell, index });
  while (deleted.length > UNDO_KEPT) {
    const { cell: gone } = deleted.shift();
    gone.view.reset();
    gone.editor.destroy();
  }
  renumberAll();
  changed();
  message(`cell ${index + 1} deleted `, el("button", { type: "button", class: "undo", onclick: undoDelete },
    "Undo"), el("span", { class: "muted" }, " (z in command mode)"));
  const near = page.cells[index] || page.cells[index - 1];
  if (near) { if (ask) near.focus(); else select(near); }
}

export function undoDelete() {
  const last = deleted.pop();
  if (!last) { message("nothing deleted to bring back"); return; }
  const index = Math.min(last.index, page.cells.length);
  page.cells.splice(index, 0, last.cell);
  cellList.insertBefore(last.cell.node, cellList.children[index] || null);
  renumberAll();
  changed();
  message(`cell ${index + 1} is back`);
  select(last.cell);
}

// "Use in next cell": the output becomes an input of the next code cell (a new one, with this
// cell's runtime: it reads what this cell wrote, when there is none); that cell keeps its own runtime.
export function useInNextCell(cell, output) {
  const index = page.cells.indexOf(cell);
  let next = page.cells[index + 1];
  if (!next || !next.isCode) next = insertCell(index + 1, { kind: "code", runtime: cell.data.runtime });
  const base = output.name.split("/").pop();
  // A newer run's file of the same name replaces the older one: two inputs cannot share a name.
  const older = next.data.inputs.filter((ref) => ref.kind === "output" && ref.name === base
    && String(ref.id) !== String(output.id));
  next.data.inputs = next.data.inputs.filter((ref) => !older.includes(ref));
  const added = next.addInput({ kind: "output", id: output.id, name: base });
  if (older.length && !added) { next.renderInputs(); changed(); }
  const what = older.length ? `replaces the earlier ${base} as an input`
    : added ? "is an input" : "is already an input";
  message(`${base} ${what} of cell ${next.number}`);
  next.node.scrollIntoView({ block: "nearest" });
}
