// Saving the notebook: autosaved whole with the version the page read, one save at a time; a
// conflict with a save made elsewhere, and leaving the page with changes not stored yet.
import { api, el, message } from "../cordon.js";
import { applyChain, chainAsked } from "./chain.js";
import { adoptNotebookInputs, refreshDatasets } from "./inputs.js";
import { renameInList } from "./notebooks.js";
import { notebookId, page } from "./state.js";

// Every change marks the notebook dirty and saves it whole a moment later (PUT with the version
// this page has). Only one save is in flight; flush() waits for the page's state to be stored,
// and throws when it cannot be (a conflict, a refused cell, no network): the text stays in the
// page and the status says it is not saved.

const SAVE_DELAY_MS = 700;
const RETRY_DELAY_MS = 5000;

export function saveStatus(text) { document.getElementById("save-status").textContent = text; }

export const saver = { dirty: false, timer: null, inflight: null, conflict: false };

export function changed() {
  saver.dirty = true;
  saveStatus(saver.conflict ? "not saved (conflict)" : "unsaved changes");
  clearTimeout(saver.timer);
  if (!saver.conflict) saver.timer = setTimeout(() => flush().catch(() => {}), SAVE_DELAY_MS);
}

export async function flush({ keepalive = false } = {}) {
  clearTimeout(saver.timer);
  while (saver.inflight) await saver.inflight.catch(() => {});
  if (saver.conflict) throw new Error("this notebook was changed elsewhere; reload it first");
  if (!saver.dirty) return;
  saver.dirty = false;
  saver.inflight = put(keepalive);
  try { await saver.inflight; } finally { saver.inflight = null; }
}

// keepalive: the page is being hidden (maybe closed), so the save should outlive it; browsers
// take such a request only up to 64 KiB.
async function put(keepalive) {
  const body = { name: page.name, version: page.version, runtime: page.runtime, environment: page.environment,
    cells: page.cells.map((cell) => cell.payload()), dataset_ids: page.notebookInputs.map((ref) => ref.id) };
  const small = new TextEncoder().encode(JSON.stringify(body)).length < 60000;
  const asked = chainAsked();
  const edits = page.inputEdits;
  saveStatus("saving…");
  try {
    const saved = await api("PUT", `/notebooks/${notebookId}`, body, { keepalive: keepalive && small });
    page.version = saved.version;
    applySaved(saved);
    if (edits === page.inputEdits) adoptNotebookInputs(saved.inputs, { whole: true });
    applyChain(saved, asked);
    saveStatus(saver.dirty ? "unsaved changes" : "all changes saved");
    renameInList(notebookId, saved.name, saved.cells.length);
  } catch (error) {
    saver.dirty = true;
    if (error.status === 409 && error.data && error.data.code === "notebook_conflict") showConflict();
    else {
      saveStatus(`not saved: ${error.message}`);
      if (!error.status || error.status >= 500) saver.timer = setTimeout(() => flush().catch(() => {}), RETRY_DELAY_MS);
    }
    throw error;
  }
}

// What the server adds to a saved cell: a markdown cell's rendering, each input's name and
// whether it still exists.
function applySaved(saved) {
  const byId = new Map(saved.cells.map((cell) => [cell.id, cell]));
  for (const cell of page.cells) {
    const stored = byId.get(cell.data.id);
    if (stored) cell.adopt(stored);
  }
}

function showConflict() {
  saver.conflict = true;
  saveStatus("not saved (conflict)");
  const box = document.getElementById("conflict");
  box.replaceChildren(
    el("p", {}, el("strong", {}, "This notebook was changed elsewhere"),
      " (in another tab or window) after this page loaded it. Your changes here are not saved."),
    el("button", { type: "button", class: "reload", onclick: () => { page.leaving = true; location.reload(); } },
      "Reload the saved notebook (drop my changes here)"),
    " ",
    el("button", { type: "button", class: "save-copy", onclick: saveAsCopy }, "Save my version as a new notebook"));
  box.hidden = false;
}

async function saveAsCopy() {
  const payload = page.cells.map((cell) => cell.payload());
  try {
    // A deleted input cannot be named by a new notebook: the copy keeps the ones that exist.
    const inputs = page.notebookInputs.filter((ref) => !ref.broken).map((ref) => ref.id);
    const copy = await api("POST", "/notebooks", { name: `${page.name} (my version)`.slice(0, 100), cells: payload,
      dataset_ids: inputs });
    page.leaving = true;
    location.assign(`/notebooks/${copy.id}/`);
  } catch (error) { message(`could not save a copy: ${error.message}`); }
}

// Leaving: no prompt unless changes are not stored yet; a page being hidden (maybe closed) saves at
// once, and one shown again reads the datasets again. The entry module calls this before it starts.
export function watchLeaving() {
  window.addEventListener("beforeunload", (event) => {
    if (page.leaving || !(saver.dirty || saver.inflight)) return;
    event.preventDefault();
    event.returnValue = "";
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden" && saver.dirty) flush({ keepalive: true }).catch(() => {});
    if (document.visibilityState === "visible") refreshDatasets();
  });
}

// Another page, once this one's changes are stored (or the user chose to leave them).
export async function navigate(url) {
  try { await flush(); } catch {
    if (!confirm("Your latest changes to this notebook are not saved. Leave anyway?")) return;
  }
  page.leaving = true;
  location.assign(url);
}
