// The notebook page: the user's notebooks (switch, create, rename, duplicate, delete, import,
// export) and this notebook's cells (code and markdown), autosaved whole with the version the page
// read; each code cell shows its last run, live or finished, from the server's record, and where its
// state comes from (the chain of state: which cell's run it starts from, whether it is stale). The
// notebook's own inputs and its variables (what a new cell at the end would start with) sit above.
// Jupyter's two modes: typing in a cell's editor, and (after Esc) command mode, where the selected
// cell takes single keys (a/b add, dd deletes with undo, m/y change kind, o hides the output...;
// COMMAND_KEYS lists them and the page shows that list on h). A new code cell takes the notebook's
// runtime, chosen in the toolbar; a cell of another runtime says so.

// The page's entry module (templates/playground.html loads it): the pieces, one module a job, are
// under notebook/; this reads the notebook and starts the page.
import { api, message } from "./cordon.js";
import { Cell } from "./notebook/cell.js";
import { addCell, renumberAll } from "./notebook/cells.js";
import { setUpCommandMode } from "./notebook/command.js";
import { renderNotebookInputs } from "./notebook/inputs.js";
import { createNotebook, deleteNotebook, duplicateNotebook, importFile, rename, renderList, setUpDrop }
  from "./notebook/notebooks.js";
import { restart, runAll } from "./notebook/runs.js";
import { changed, flush, saveStatus, saver, watchLeaving } from "./notebook/saving.js";
import { cellList, notebookId, page, root } from "./notebook/state.js";
import { renderVariables } from "./notebook/variables.js";

// The notebook's runtime, chosen in the toolbar: what its new code cells take.
function setUpRuntime(select) {
  select.value = page.runtime;
  select.addEventListener("change", () => {
    page.runtime = select.value;
    for (const cell of page.cells) cell.renderRuntime();
    changed();
  });
}

// The notebook's environment: its cells of that environment's runtime run in it from their next run.
function setUpEnvironment(select) {
  select.value = page.environment;
  select.addEventListener("change", () => {
    page.environment = select.value;
    changed();
  });
}

async function start() {
  const [notebook, found, described, notebooks, egress] = await Promise.all([
    api("GET", `/notebooks/${notebookId}`), api("GET", "/datasets"), api("GET", "/limits"),
    api("GET", "/notebooks"), api("GET", "/egress")]);
  page.datasets = found;
  page.notebookInputs = notebook.inputs.map((ref) => ({ ...ref }));
  page.siteEgress = egress.ceiling;
  page.limitInfo = Object.fromEntries(described.map((limit) => [limit.name, limit]));
  page.name = notebook.name;
  page.version = notebook.version;
  page.runtime = notebook.runtime;
  page.environment = notebook.environment;
  renderList(notebooks);
  const nameInput = document.getElementById("notebook-name");
  nameInput.value = page.name;
  nameInput.addEventListener("change", () => rename(nameInput));
  nameInput.addEventListener("keydown", (event) => { if (event.key === "Enter") nameInput.blur(); });
  page.cells = [];
  for (const data of notebook.cells) {
    const cell = new Cell(data);
    page.cells.push(cell);
  }
  cellList.replaceChildren(...page.cells.map((cell) => cell.node));
  renumberAll();
  for (const cell of page.cells) cell.renderChain();  // now that every cell has its place
  renderNotebookInputs();
  renderVariables(notebook.state);
  // Each code cell shows its last run: the stored outcome, or the live stream of one still going.
  for (const cell of page.cells) if (cell.isCode && cell.data.last_run_id) cell.follow(cell.data.last_run_id);
  document.getElementById("add-code").addEventListener("click", () => addCell("code"));
  document.getElementById("add-markdown").addEventListener("click", () => addCell("markdown"));
  document.getElementById("run-all").addEventListener("click", runAll);
  document.getElementById("restart").addEventListener("click", restart);
  document.getElementById("new-notebook").addEventListener("click", createNotebook);
  document.getElementById("duplicate-notebook").addEventListener("click", duplicateNotebook);
  document.getElementById("delete-notebook").addEventListener("click", deleteNotebook);
  const exporter = document.getElementById("export-notebook");
  exporter.addEventListener("click", async (event) => {
    if (!saver.dirty && !saver.inflight) return;  // the stored notebook is what the page shows
    event.preventDefault();
    try { await flush(); exporter.click(); } catch (error) { message(`not exported: ${error.message}`); }
  });
  const picker = document.getElementById("import-file");
  picker.addEventListener("change", () => { importFile(picker.files[0]); picker.value = ""; });
  setUpDrop();
  setUpCommandMode();
  setUpRuntime(document.getElementById("notebook-runtime"));
  setUpEnvironment(document.getElementById("notebook-environment"));
  root.dataset.ready = "true";
  saveStatus("all changes saved");
}

watchLeaving();
start().catch((error) => message(`this notebook could not be loaded: ${error.message}`));
