// Running cells: one cell, a sequence (Run all, Run from here), clearing a cell's output,
// restarting the chain of state; and what the editor offers at the cursor.
import { api, message } from "../cordon.js";
import { applyChain, chainAsked, refreshChain } from "./chain.js";
import { flush, saver } from "./saving.js";
import { notebookId, page } from "./state.js";

export async function clearCell(cell) {
  try {
    await flush();
    const saved = await api("POST", `/notebooks/${notebookId}/cells/${cell.data.id}/clear`, {});
    if (!saver.inflight && saved.version > page.version) page.version = saved.version;
    cell.data.last_run_id = null;
    cell.view.reset();
    cell.showRun(null);
    cell.renderImported();
    refreshChain();  // the answer may predate a save still to come: read once the saves are done
  } catch (error) { message(`cell ${cell.number} not cleared: ${error.message}`); }
}

// What the editor offers at the cursor (POST /complete: the state the cell would start from, the
// image's modules, the code above): null when the notebook is not on the server yet or the answer
// does not come, so the editor falls back to its own local names. The cell above is named too: a
// cell added and not saved yet starts from what that one leaves.
export async function complete(cell, code, cursor) {
  if (!notebookId) return null;
  const above = page.cells[page.cells.indexOf(cell) - 1];
  const body = { cell_id: cell.data.id, code, cursor, ...(above ? { above_cell_id: above.data.id } : {}) };
  try {
    return await api("POST", `/notebooks/${notebookId}/complete`, body);
  } catch {
    return null;
  }
}

// Saves, then runs the cell as stored; resolves with the run's record when it ends, or with
// {outcome: null, reason} when it did not start.
export async function runCell(cell) {
  if (!cell.isCode) return { outcome: null, reason: "a markdown cell does not run" };
  if (cell.active || cell.starting) return { outcome: null, reason: "it is already running" };
  cell.starting = true;
  cell.updateButtons();
  cell.view.say("saving and starting…");
  cell.showRun(null);
  try {
    await flush();
    const run = await api("POST", `/notebooks/${notebookId}/cells/${cell.data.id}/run`, {});
    const followed = cell.follow(run.id);
    cell.starting = false;
    cell.updateButtons();
    return await followed;
  } catch (error) {
    const reason = `not started: ${error.message}`;
    cell.view.say(reason);
    return { outcome: null, reason };
  } finally {
    cell.starting = false;
    cell.updateButtons();
  }
}

export function runAll() { return runSequence(0, "Run all"); }
export function runFrom(cell) { return runSequence(page.cells.indexOf(cell), `Run from cell ${cell.number}`); }

// Runs the code cells from `index` down, in order, each once the one above it has finished (its
// state is what the next starts from), and stops at the first that does not succeed. One
// sequence at a time: two would interleave and each cell would start from whichever ran last.
async function runSequence(index, label) {
  if (page.sequence !== null || index < 0) return;
  page.sequence = label;
  updateSequenceButtons();
  let ran = 0;
  try {
    for (const cell of page.cells.slice(index)) {
      if (!cell.isCode || !page.cells.includes(cell)) continue;
      message(`${label}: cell ${cell.number}…`);
      const run = await runCell(cell);
      if (run.outcome !== "succeeded") {
        const why = run.outcome ? `${run.outcome_text || run.outcome}${run.reason ? ` (${run.reason})` : ""}`
          : run.reason;
        message(`${label} stopped at cell ${cell.number}: ${why}`);
        cell.node.scrollIntoView({ block: "nearest" });
        return;
      }
      ran += 1;
    }
    message(`${label}: ${ran} code cell${ran === 1 ? "" : "s"} succeeded`);
  } finally {
    page.sequence = null;
    updateSequenceButtons();
  }
}

function updateSequenceButtons() {
  document.getElementById("run-all").disabled = page.sequence !== null;
  for (const cell of page.cells) cell.updateButtons();
}

// "Restart (clear state)": no run so far passes state down; the runs and their outputs stay (stale).
export async function restart() {
  if (!confirm("Restart: every cell starts from nothing until the cells above run again. Outputs stay.")) return;
  const asked = chainAsked();
  try {
    applyChain(await api("POST", `/notebooks/${notebookId}/restart`, {}), asked);
    message("Restarted: every cell starts from nothing until the cells above it run again");
  } catch (error) { message(`not restarted: ${error.message}`); }
}
