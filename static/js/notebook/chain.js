// The chain of state as the server tells it: where each code cell starts from, whether it is
// stale, and the notebook's variables; in words ("cell 3's run at 14:02:11").
import { api } from "../cordon.js";
import { formatWhen } from "../format.js";
import { adoptNotebookInputs } from "./inputs.js";
import { saver } from "./saving.js";
import { notebookId, page } from "./state.js";
import { renderVariables } from "./variables.js";

const REFRESH_DELAY_MS = 300;

// Which run each code cell starts from, whether it is stale, and the notebook's variables come
// with every answer that holds the notebook (a save, a restart, a clear, a read). They are the
// server's facts about the stored notebook, so an answer never touches what the user is editing;
// and an answer to a request made before the one last applied is older news, left out.

let chainAskedCount = 0;
let chainShown = 0;
export function chainAsked() { chainAskedCount += 1; return chainAskedCount; }

export function applyChain(notebook, asked) {
  if (asked < chainShown) return;
  chainShown = asked;
  const byId = new Map(notebook.cells.map((cell) => [cell.id, cell]));
  for (const cell of page.cells) {
    const stored = byId.get(cell.data.id);
    if (stored && cell.isCode) cell.setChain(stored);
  }
  renderVariables(notebook.state);
}

// Reads the notebook again once a run ended (several ends close together: one read). A save in
// flight answers with the same facts, newer: the read waits for it, so it never passes it.
let refreshTimer = null;
export function refreshChain() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(async () => {
    while (saver.inflight) await saver.inflight.catch(() => {});
    const asked = chainAsked();
    try {
      const notebook = await api("GET", `/notebooks/${notebookId}`);
      adoptNotebookInputs(notebook.inputs, { whole: false });
      applyChain(notebook, asked);
    } catch { /* the next save or run end reads it again */ }
  }, REFRESH_DELAY_MS);
}

// "14:02:11" for a run today, the date as well for an older one; in the reader's locale.
function when(iso) {
  const date = new Date(iso);
  return date.toDateString() === new Date().toDateString() ? date.toLocaleTimeString() : formatWhen(iso);
}

// "cell 3's run at 14:02:11" for a starts_from; the cell's place now (cells move before the
// next save says so), else the server's number.
export function runWords(from) {
  const index = page.cells.findIndex((cell) => cell.data.id === from.cell_id);
  const at = from.finished_at ? ` at ${when(from.finished_at)}` : "";
  return `cell ${index >= 0 ? index + 1 : from.cell_number}'s run${at}`;
}
