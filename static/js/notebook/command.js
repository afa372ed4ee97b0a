// Command mode (after Esc): which cell is selected, and the single keys it takes there
// (COMMAND_KEYS lists them; the page shows that list on h).
import { el } from "../cordon.js";
import { deleteCell, focusNext, insertCell, undoDelete } from "./cells.js";
import { runCell } from "./runs.js";
import { cellList, page } from "./state.js";

let firstD = -Infinity;  // when the first d of a "dd" was pressed (performance.now())
const DD_MS = 800;

const COMMAND_KEYS = [
  ["Esc", "leave the editor: command mode (the cell stays selected)"],
  ["Enter", "edit the selected cell"],
  ["↑ / k, ↓ / j", "select the cell above, below"],
  ["a / b", "add a code cell above, below"],
  ["d d", "delete the cell (z brings it back)"],
  ["z", "undo the last deletion"],
  ["m / y", "make it a markdown cell, a code cell"],
  ["o", "hide or show its output"],
  ["Shift+Enter", "run it and select the next"],
  ["Ctrl/Cmd+Enter", "run it"],
  ["h", "show or hide this list"],
];

// Selects `cell` (the one command mode acts on); with focus, command mode: the cell itself has the
// focus, not its editor.
export function select(cell, { focus = true } = {}) {
  if (page.selected && page.selected !== cell) page.selected.node.classList.remove("selected");
  page.selected = cell;
  cell.node.classList.add("selected");
  if (focus) {
    cell.node.focus({ preventScroll: true });
    cell.node.scrollIntoView({ block: "nearest" });
  }
}

function selectStep(cell, step) {
  const next = page.cells[page.cells.indexOf(cell) + step];
  if (next) select(next);
}

function addNear(cell, step) {
  const index = page.cells.indexOf(cell) + (step > 0 ? 1 : 0);
  select(insertCell(index, { kind: "code", runtime: page.runtime }));
}

function makeKind(cell, kind) {
  const want = kind === "markdown" ? "markdown" : cell.isCode ? cell.data.runtime : page.runtime;
  if ((cell.isCode ? cell.data.runtime : "markdown") !== want) cell.setType(want);
  select(cell);
}

function toggleKeys() {
  const help = document.getElementById("keys");
  help.open = !help.open;
  if (help.open) help.scrollIntoView({ block: "nearest" });
}

// Keys on a selected cell (the cell itself focused: not its editor, an input or a button).
function commandKey(event) {
  const cell = page.cells.find((c) => c.node === event.target);
  if (!cell || event.altKey) return;
  const mod = event.ctrlKey || event.metaKey;
  const key = event.key;
  let done = true;
  if (key === "Enter" && (event.shiftKey || mod)) {
    if (cell.isCode) runCell(cell); else cell.render();
    if (event.shiftKey) {
      const next = page.cells[page.cells.indexOf(cell) + 1];
      if (next) select(next); else focusNext(cell);
    }
  } else if (mod || (event.shiftKey && key.length !== 1)) done = false;
  else if (key === "Enter") cell.enterEditor();
  else if (key === "ArrowUp" || key === "k") selectStep(cell, -1);
  else if (key === "ArrowDown" || key === "j") selectStep(cell, 1);
  else if (key === "a") addNear(cell, -1);
  else if (key === "b") addNear(cell, 1);
  else if (key === "d") {
    const now = performance.now();
    if (now - firstD < DD_MS) { firstD = -Infinity; deleteCell(cell, { ask: false }); } else firstD = now;
  } else if (key === "z") undoDelete();
  else if (key === "m") makeKind(cell, "markdown");
  else if (key === "y") makeKind(cell, "code");
  else if (key === "o" && cell.isCode) cell.toggleOutput();
  else if (key === "h") toggleKeys();
  else done = false;
  if (key !== "d") firstD = -Infinity;
  if (done) event.preventDefault();
}

export function setUpCommandMode() {
  cellList.addEventListener("keydown", commandKey);
  document.getElementById("keys-list").replaceChildren(...COMMAND_KEYS.flatMap(([keys, what]) =>
    [el("dt", {}, el("kbd", {}, keys)), el("dd", {}, what)]));
}
