// The user's notebooks: the list beside this one, and switching, creating, duplicating, deleting,
// renaming and importing (a file picked or dropped on the page).
import { api, el, message } from "../cordon.js";
import { newId } from "./cells.js";
import { changed, flush, navigate } from "./saving.js";
import { notebookId, page } from "./state.js";

export function renameInList(id, newName, count) {
  const item = document.querySelector(`#notebook-list li[data-id="${id}"]`);
  if (!item) return;
  item.querySelector(".notebook-link").textContent = newName;
  if (count !== undefined) item.querySelector(".cell-count").textContent = cellCount(count);
}

function cellCount(count) { return `${count} cell${count === 1 ? "" : "s"}`; }

export function renderList(notebooks) {
  const list = document.getElementById("notebook-list");
  list.replaceChildren(...notebooks.map((notebook) => {
    const current = notebook.id === notebookId;
    const link = el("a", { class: "notebook-link", href: `/notebooks/${notebook.id}/`,
      "aria-current": current ? "page" : null }, notebook.name);
    link.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;  // a new tab: as it is
      event.preventDefault();
      if (!current) navigate(link.href);
    });
    return el("li", { "data-id": notebook.id, class: current ? "current" : null }, link, " ",
      el("span", { class: "muted cell-count" }, cellCount(notebook.cell_count)));
  }));
  return notebooks;
}

export async function createNotebook() {
  const names = new Set([...document.querySelectorAll("#notebook-list .notebook-link")].map((a) => a.textContent));
  let number = names.size + 1;
  while (names.has(`Notebook ${number}`)) number += 1;
  try {
    await flush();
    const created = await api("POST", "/notebooks", { name: `Notebook ${number}`, cells: [
      { id: newId(), kind: "code", runtime: "python", source: "", inputs: [], limits: {} }] });
    navigate(`/notebooks/${created.id}/`);
  } catch (error) { message(`no new notebook: ${error.message}`); }
}

export async function duplicateNotebook() {
  try {
    await flush();
    const copy = await api("POST", `/notebooks/${notebookId}/duplicate`, {});
    navigate(`/notebooks/${copy.id}/`);
  } catch (error) { message(`not duplicated: ${error.message}`); }
}

export async function deleteNotebook() {
  if (!confirm(`Delete the notebook "${page.name}" and its cells? Its runs stay under Runs.`)) return;
  try {
    await api("DELETE", `/notebooks/${notebookId}`);
    page.leaving = true;
    location.assign("/playground/");
  } catch (error) { message(`not deleted: ${error.message}`); }
}

export async function importFile(file) {
  if (!file) return;
  if (!/\.(ipynb|py|js)$/i.test(file.name)) {
    message(`${file.name}: import a .ipynb notebook or a .py or .js script`);
    return;
  }
  message(`importing ${file.name}…`);
  const form = new FormData();
  form.append("file", file);
  try {
    await flush().catch(() => {});
    const created = await api("POST", "/notebooks/import", form);
    navigate(`/notebooks/${created.id}/`);
  } catch (error) { message(`${file.name} not imported: ${error.message}`); }
}

export function rename(input) {
  const value = input.value.replace(/\s+/g, " ").trim();
  if (!value) { input.value = page.name; return; }
  if (value === page.name) return;
  page.name = value;
  document.title = `${page.name} · Cordon`;
  renameInList(notebookId, page.name);
  changed();
}

// A file dragged anywhere over the page opens as a new notebook. Caught before the editors, which
// would otherwise paste a dropped file's text into a cell.
export function setUpDrop() {
  const overlay = document.getElementById("drop-overlay");
  const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes("Files");
  let depth = 0;
  window.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    overlay.hidden = false;
  }, true);
  window.addEventListener("dragleave", (event) => {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) overlay.hidden = true;
  }, true);
  window.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.stopPropagation();
    event.dataTransfer.dropEffect = "copy";
  }, true);
  window.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.stopPropagation();
    depth = 0;
    overlay.hidden = true;
    importFile(event.dataTransfer.files[0]);
  }, true);
}
