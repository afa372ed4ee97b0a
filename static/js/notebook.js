// The notebook page: the user's notebooks (switch, create, rename, duplicate, delete, import,
// export) and this notebook's cells (code and markdown), autosaved whole with the version the page
// read; each code cell shows its last run, live or finished, from the server's record, and where its
// state comes from (the chain of state: which cell's run it starts from, whether it is stale). The
// notebook's own inputs and its variables (what a new cell at the end would start with) sit above.
// Jupyter's two modes: typing in a cell's editor, and (after Esc) command mode, where the selected
// cell takes single keys (a/b add, dd deletes with undo, m/y change kind, o hides the output...;
// COMMAND_KEYS lists them and the page shows that list on h). A new code cell takes the notebook's
// runtime, chosen in the toolbar; a cell of another runtime says so.
// CordonEditor: the CodeMirror bundle (static/vendor/codemirror.js), a classic script loaded before.

// LIMITS: the limits a cell offers
import { api, appendAnsi, displayNode, el, LIMITS, markdownNodes, tableView } from "./cordon.js";
import { RunView } from "./run_view.js";
import { egressRules, egressWords, formatBytes, formatWhen } from "./format.js";

const root = document.getElementById("notebook");
const notebookId = root.dataset.notebookId;
const cellList = document.getElementById("cells");
const TYPES = [["python", "Python"], ["node", "JavaScript"], ["markdown", "Markdown"]];
const SAVE_DELAY_MS = 700;
const RETRY_DELAY_MS = 5000;
const REFRESH_DELAY_MS = 300;

let limitInfo = {};
let siteEgress = [];  // the site's egress ceiling: a cell's network box shows only when it allows something
let datasets = [];
let cells = [];
let name = "";
let version = 0;
let leaving = false;  // set once the user chose to leave: no "unsaved changes" prompt then
let notebookInputs = [];  // the notebook's own inputs: every code cell sees them under /input
let inputEdits = 0;  // changes to notebookInputs made here (a save's answer replaces them only if none since)
let sequence = null;  // the Run all / Run from here going on, if any: one at a time
let runtime = "python";  // the notebook's: what a new code cell takes
let environment = "";  // the notebook's: where its cells run ("": each runtime's own image)
let selected = null;  // the cell command mode acts on (the one last focused)
let firstD = -Infinity;  // when the first d of a "dd" was pressed (performance.now())
const DD_MS = 800;
const deleted = [];  // cells deleted here, newest last, for z (undo): {cell, index}
const UNDO_KEPT = 20;
const RUNTIME_WORDS = Object.fromEntries(TYPES);

function message(text, ...actions) { document.getElementById("message").replaceChildren(text, ...actions); }
function saveStatus(text) { document.getElementById("save-status").textContent = text; }

function newId() {
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

// --- saving -------------------------------------------------------------------------------
// Every change marks the notebook dirty and saves it whole a moment later (PUT with the version
// this page has). Only one save is in flight; flush() waits for the page's state to be stored,
// and throws when it cannot be (a conflict, a refused cell, no network): the text stays in the
// page and the status says it is not saved.

const saver = { dirty: false, timer: null, inflight: null, conflict: false };

function changed() {
  saver.dirty = true;
  saveStatus(saver.conflict ? "not saved (conflict)" : "unsaved changes");
  clearTimeout(saver.timer);
  if (!saver.conflict) saver.timer = setTimeout(() => flush().catch(() => {}), SAVE_DELAY_MS);
}

async function flush({ keepalive = false } = {}) {
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
  const body = { name, version, runtime, environment, cells: cells.map((cell) => cell.payload()),
    dataset_ids: notebookInputs.map((ref) => ref.id) };
  const small = new TextEncoder().encode(JSON.stringify(body)).length < 60000;
  const asked = chainAsked();
  const edits = inputEdits;
  saveStatus("saving…");
  try {
    const saved = await api("PUT", `/notebooks/${notebookId}`, body, { keepalive: keepalive && small });
    version = saved.version;
    applySaved(saved);
    if (edits === inputEdits) adoptNotebookInputs(saved.inputs, { whole: true });
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
  for (const cell of cells) {
    const stored = byId.get(cell.data.id);
    if (stored) cell.adopt(stored);
  }
}

// --- the chain of state -----------------------------------------------------------------------
// Which run each code cell starts from, whether it is stale, and the notebook's variables come
// with every answer that holds the notebook (a save, a restart, a clear, a read). They are the
// server's facts about the stored notebook, so an answer never touches what the user is editing;
// and an answer to a request made before the one last applied is older news, left out.

let chainAskedCount = 0;
let chainShown = 0;
function chainAsked() { chainAskedCount += 1; return chainAskedCount; }

function applyChain(notebook, asked) {
  if (asked < chainShown) return;
  chainShown = asked;
  const byId = new Map(notebook.cells.map((cell) => [cell.id, cell]));
  for (const cell of cells) {
    const stored = byId.get(cell.data.id);
    if (stored && cell.isCode) cell.setChain(stored);
  }
  renderVariables(notebook.state);
}

// Reads the notebook again once a run ended (several ends close together: one read). A save in
// flight answers with the same facts, newer: the read waits for it, so it never passes it.
let refreshTimer = null;
function refreshChain() {
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
function runWords(from) {
  const index = cells.findIndex((cell) => cell.data.id === from.cell_id);
  const at = from.finished_at ? ` at ${when(from.finished_at)}` : "";
  return `cell ${index >= 0 ? index + 1 : from.cell_number}'s run${at}`;
}

function showConflict() {
  saver.conflict = true;
  saveStatus("not saved (conflict)");
  const box = document.getElementById("conflict");
  box.replaceChildren(
    el("p", {}, el("strong", {}, "This notebook was changed elsewhere"),
      " (in another tab or window) after this page loaded it. Your changes here are not saved."),
    el("button", { type: "button", class: "reload", onclick: () => { leaving = true; location.reload(); } },
      "Reload the saved notebook (drop my changes here)"),
    " ",
    el("button", { type: "button", class: "save-copy", onclick: saveAsCopy }, "Save my version as a new notebook"));
  box.hidden = false;
}

async function saveAsCopy() {
  const payload = cells.map((cell) => cell.payload());
  try {
    // A deleted input cannot be named by a new notebook: the copy keeps the ones that exist.
    const inputs = notebookInputs.filter((ref) => !ref.broken).map((ref) => ref.id);
    const copy = await api("POST", "/notebooks", { name: `${name} (my version)`.slice(0, 100), cells: payload,
      dataset_ids: inputs });
    leaving = true;
    location.assign(`/notebooks/${copy.id}/`);
  } catch (error) { message(`could not save a copy: ${error.message}`); }
}

window.addEventListener("beforeunload", (event) => {
  if (leaving || !(saver.dirty || saver.inflight)) return;
  event.preventDefault();
  event.returnValue = "";
});
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden" && saver.dirty) flush({ keepalive: true }).catch(() => {});
  if (document.visibilityState === "visible") refreshDatasets();
});

// Datasets uploaded in another tab appear in the cells' pickers when the user comes back.
async function refreshDatasets() {
  try { datasets = await api("GET", "/datasets"); } catch { return; }
  for (const cell of cells) if (cell.isCode) cell.renderInputs();
  renderNotebookInputs();
}

// Another page, once this one's changes are stored (or the user chose to leave them).
async function navigate(url) {
  try { await flush(); } catch {
    if (!confirm("Your latest changes to this notebook are not saved. Leave anyway?")) return;
  }
  leaving = true;
  location.assign(url);
}

// --- cells --------------------------------------------------------------------------------

class Cell {
  constructor(data) {
    this.data = {
      id: data.id, kind: data.kind || "code", runtime: data.runtime || "python", source: data.source || "",
      inputs: (data.inputs || []).map((ref) => ({ ...ref })), limits: { ...(data.limits || {}) },
      egress: [...(data.egress || [])], last_run_id: data.last_run_id || null,
    };
    this.html = data.html || "";
    this.imported = data.imported || [];
    this.chain = { stale: data.stale, stale_why: data.stale_why, starts_from: data.starts_from,
      fresh_start: data.fresh_start };
    this.editing = this.data.kind === "markdown" && !this.data.source;
    this.starting = false;
    this.active = false;
    this.marks = { run: null, running: false };  // what showRun shows, kept for a rebuild of the cell
    this.collapsed = false;  // its output hidden (o in command mode; this page only)
    this.node = el("section", { class: "cell", "data-cell-id": this.data.id, tabindex: "-1" });
    this.node.addEventListener("focusin", () => select(this, { focus: false }));
    this.viewRoot = el("div", { class: "run-view" });
    this.view = new RunView(this.viewRoot, {
      onOutputs: (output) => useInNextCell(this, output),
      onActive: (active) => { this.active = active; this.updateButtons(); },
    });
    this.build();
  }

  // What a save sends: the reference of each input, not what the page shows of it.
  payload() {
    const { id, kind, runtime, source, limits, egress, last_run_id } = this.data;
    return { id, kind, runtime, source, limits, egress, last_run_id,
      inputs: this.data.inputs.map((ref) => ({ kind: ref.kind, id: ref.id })) };
  }

  adopt(stored) {
    if (stored.kind === "markdown" && (stored.html || "") !== this.html) {
      this.html = stored.html || "";
      if (!this.editing && !this.isCode) this.showMarkdown();
    }
    const seen = new Map(stored.inputs.map((ref) => [`${ref.kind}:${ref.id}`, ref]));
    let news = false;
    for (const ref of this.data.inputs) {
      const known = seen.get(`${ref.kind}:${ref.id}`);
      if (!known) continue;
      const shown = { name: known.name, broken: known.broken, fix: known.fix };
      if (JSON.stringify(shown) !== JSON.stringify({ name: ref.name, broken: ref.broken, fix: ref.fix })) news = true;
      Object.assign(ref, shown);
    }
    if (news) this.renderInputs();
  }

  // Shows run `runId` (live or finished) and resolves with its record when it ends; the chain of
  // state is read again then, as the run may have changed where the cells below start from.
  async follow(runId) {
    this.data.last_run_id = runId;
    this.renderImported();
    this.showRun(null, { running: true });
    const run = await this.view.follow(runId);
    if (run.reason !== "cleared") refreshChain();
    if (this.data.last_run_id === runId) this.showRun(run);
    return run;
  }

  // Jupyter's marks of the cell's last run: its number in the kernel's count beside the cell's
  // own ("In [7]"; "In [*]" while it runs; none before it ran), and the line its error names,
  // marked in the editor while the code is the code that ran (an edit takes the mark away).
  showRun(run, { running = false } = {}) {
    this.marks = { run, running };
    if (!this.isCode) return;
    this.collapseButton.hidden = !(run || running);  // nothing to hide yet
    const count = run && run.cell ? run.cell.execution_count : null;
    this.countLabel.textContent = running ? "In [*]" : Number.isInteger(count) ? `In [${count}]` : "";
    this.countLabel.title = running ? "running" : Number.isInteger(count)
      ? `execution count ${count}: the kernel's count goes on with the state, from cell to cell` : "";
    const error = run && run.cell && run.cell.error;
    const line = error && Number.isInteger(error.line) && run.code === this.data.source ? error.line : null;
    const why = line === null ? "" : `line ${line} failed: ${error.ename}: ${error.evalue}`;
    CordonEditor.markErrorLine(this.editor, line, why.length > 300 ? `${why.slice(0, 299)}…` : why);
  }

  get number() { return cells.indexOf(this) + 1; }
  get isCode() { return this.data.kind === "code"; }

  build() {
    const data = this.data;
    this.node.dataset.kind = data.kind;
    const type = el("select", { class: "cell-type", "aria-label": "cell type" },
      ...TYPES.map(([value, label]) => el("option", { value }, label)));
    type.value = data.kind === "markdown" ? "markdown" : data.runtime;
    type.addEventListener("change", () => this.setType(type.value));
    this.numberLabel = el("span", { class: "cell-number" }, "");
    this.countLabel = this.isCode ? el("span", { class: "execution-count" }, "") : null;
    this.staleBadge = el("span", { class: "stale-badge", hidden: true }, "stale");
    this.runtimeBadge = el("span", { class: "runtime-badge", hidden: true }, "");
    const bar = el("div", { class: "cell-bar" }, this.numberLabel, this.countLabel, this.staleBadge, type,
      this.runtimeBadge);
    if (this.isCode) {
      this.runButton = el("button", { type: "button", class: "run", "aria-label": "run this cell",
        title: "Run (Ctrl/Cmd+Enter; Shift+Enter runs and moves on)", onclick: () => runCell(this) }, "Run");
      this.runFromButton = el("button", { type: "button", class: "run-from",
        "aria-label": "run from here: this cell, then each code cell below", onclick: () => runFrom(this) }, "Run from here");
      bar.append(this.runButton, this.runFromButton);
    } else {
      this.runButton = null;
      this.runFromButton = null;
      this.renderButton = el("button", { type: "button", class: "render", onclick: () => this.toggleEditing() }, "");
      bar.append(this.renderButton);
    }
    bar.append(el("span", { class: "spacer" }));
    this.upButton = el("button", { type: "button", class: "move-up icon", "aria-label": "move this cell up",
      title: "move up", onclick: () => moveCell(this, -1) }, "↑");
    this.downButton = el("button", { type: "button", class: "move-down icon", "aria-label": "move this cell down",
      title: "move down", onclick: () => moveCell(this, 1) }, "↓");
    bar.append(this.upButton, this.downButton);
    if (this.isCode) {
      this.clearButton = el("button", { type: "button", class: "clear", "aria-label": "clear this cell's output",
        onclick: () => clearCell(this) }, "Clear");
      this.collapseButton = el("button", { type: "button", class: "collapse", onclick: () => this.toggleOutput() }, "");
      bar.append(this.collapseButton, this.clearButton);
    } else { this.clearButton = null; this.collapseButton = null; }
    bar.append(el("button", { type: "button", class: "delete icon", "aria-label": "delete this cell", title: "delete",
      onclick: () => deleteCell(this) }, "✕"));

    this.editorBox = el("div", { class: "editor" });
    const parts = [bar, this.editorBox];
    if (this.isCode) {
      this.callLine = el("p", { class: "call-signature small", role: "status", hidden: true });
      parts.push(this.callLine);
      this.inputsBox = el("div", { class: "inputs", role: "group", "aria-label": "inputs" });
      parts.push(this.inputsBox, this.limitsBox());
      // A cell kept from when the site allowed more still shows its policy, so it can be emptied.
      if (siteEgress.length || this.data.egress.length) parts.push(this.networkBox());
      this.chainLine = el("p", { class: "chain small muted" });
      this.importedBox = el("div", { class: "imported" });
      this.collapsedNote = el("button", { type: "button", class: "collapsed-note link",
        onclick: () => this.toggleOutput() }, "output hidden: show it");
      parts.push(this.chainLine, this.importedBox, this.viewRoot, this.collapsedNote);
    } else {
      this.markdownView = el("div", { class: "markdown-view", tabindex: "0", "aria-label": "rendered markdown",
        title: "double-click to edit" });
      this.markdownView.addEventListener("dblclick", () => this.edit());
      this.markdownView.addEventListener("keydown", (event) => {
        if (event.key === "Escape") { event.preventDefault(); select(this); return; }
        if (event.key !== "Enter") return;
        event.preventDefault();
        if (event.shiftKey) focusNext(this); else this.edit();
      });
      parts.push(this.markdownView);
    }
    this.node.replaceChildren(...parts);
    this.makeEditor();
    this.showRun(this.marks.run, { running: this.marks.running });
    if (this.isCode) { this.renderInputs(); this.renderImported(); }
    else if (this.editing) this.edit(false); else this.showMarkdown();
    this.renderChain();
    this.renderRuntime();
    this.renderCollapsed();
    this.renumber();
    this.updateButtons();
  }

  // A code cell whose runtime is not the notebook's says which it is, beside its type.
  renderRuntime() {
    const other = this.isCode && this.data.runtime !== runtime;
    this.runtimeBadge.hidden = !other;
    this.runtimeBadge.textContent = other ? `${RUNTIME_WORDS[this.data.runtime]} cell` : "";
    this.runtimeBadge.title = other ? `this cell runs ${RUNTIME_WORDS[this.data.runtime]}; the notebook's new cells `
      + `are ${RUNTIME_WORDS[runtime]}` : "";
    this.node.classList.toggle("other-runtime", other);
  }

  toggleOutput() {
    this.collapsed = !this.collapsed;
    this.renderCollapsed();
  }

  renderCollapsed() {
    if (!this.isCode) return;
    this.viewRoot.classList.toggle("collapsed", this.collapsed);
    this.collapsedNote.hidden = !this.collapsed;
    this.collapseButton.textContent = this.collapsed ? "Show output" : "Hide output";
    this.collapseButton.setAttribute("aria-label", `${this.collapsed ? "show" : "hide"} this cell's output`);
    this.collapseButton.setAttribute("aria-expanded", String(!this.collapsed));
  }

  makeEditor() {
    if (this.editor) this.editor.destroy();
    this.editorBox.replaceChildren();
    this.editor = CordonEditor.create(this.editorBox, {
      doc: this.data.source,
      language: this.isCode ? this.data.runtime : "markdown",
      label: this.isCode ? "code" : "markdown source",
      onRun: () => (this.isCode ? runCell(this) : this.render()),
      onRunNext: () => {
        if (this.isCode) runCell(this); else this.render();
        focusNext(this);
      },
      onEscape: () => { this.showCall(null); select(this); },
      onChange: (source) => { this.data.source = source; changed(); },
      complete: this.isCode ? (code, cursor) => complete(this, code, cursor) : null,
      onCall: (call) => this.showCall(call),
    });
    this.editor.contentDOM.addEventListener("blur", () => this.showCall(null));
  }

  // The signature of the call the cursor is in, under the editor (Jupyter's Shift-Tab, on `(`).
  showCall(call) {
    if (!this.callLine) return;
    this.callLine.hidden = !call;
    if (!call) return;
    this.callLine.replaceChildren(el("code", {}, `${call.name}${call.signature}`), call.doc ? ` — ${call.doc}` : "");
  }

  limitsBox() {
    const box = el("details", { class: "limits" }, el("summary", {}, "Limits"));
    if (Object.keys(this.data.limits).length) box.open = true;
    for (const [limit, label] of LIMITS) {
      const info = limitInfo[limit] || {};
      const input = el("input", { type: "number", min: "0", step: info.type === "integer" ? "1" : "any", name: limit,
        placeholder: String(info.default ?? ""), title: info.maximum ? `at most ${info.maximum} ${info.unit}` : null });
      if (info.maximum) input.max = String(info.maximum);
      if (this.data.limits[limit] !== undefined) input.value = this.data.limits[limit];
      input.addEventListener("change", () => {
        if (input.value === "") delete this.data.limits[limit]; else this.data.limits[limit] = Number(input.value);
        changed();
      });
      box.append(el("label", {}, `${label} ${info.unit || ""} `, input));
    }
    return box;
  }

  // The destinations this cell's runs may reach; checked against the site's ceiling when it runs.
  networkBox() {
    const box = el("details", { class: "limits network" }, el("summary", {}, "Network"));
    if (this.data.egress.length) box.open = true;
    const input = el("input", { type: "text", name: "egress", placeholder: "api.example.org:443 *.example.net:443",
      spellcheck: "false", autocomplete: "off" });
    input.value = this.data.egress.join(" ");
    input.addEventListener("change", () => {
      this.data.egress = egressRules(input.value);
      input.value = this.data.egress.join(" ");
      changed();
    });
    const allows = siteEgress.length ? "" : ": this cell's runs are refused until its destinations are removed";
    box.append(el("label", {}, "destinations, separated by commas or spaces ", input),
      el("p", { class: "muted" }, `This service allows ${egressWords(siteEgress)}${allows}.`));
    return box;
  }

  setType(value) {
    if (value === "markdown") this.data.kind = "markdown";
    else { this.data.kind = "code"; this.data.runtime = value; }
    this.editing = this.data.kind === "markdown";
    if (!this.isCode) { this.view.reset(); this.marks = { run: null, running: false }; this.collapsed = false; }
    this.build();
    changed();
  }

  // Enter in command mode: into the editor (a rendered markdown cell shows its source).
  enterEditor() {
    if (this.data.kind === "markdown" && !this.editing) this.edit(); else this.editor.focus();
  }

  renumber() {
    const number = this.number;
    this.numberLabel.textContent = `cell ${number}`;  // its place; "In [n]" beside it is the kernel's count
    this.node.setAttribute("aria-label", `cell ${number}`);
    this.updateButtons();
  }

  updateButtons() {
    const busy = this.active || this.starting;
    if (this.runButton) this.runButton.disabled = busy;
    if (this.runFromButton) this.runFromButton.disabled = busy || sequence !== null;
    if (this.clearButton) this.clearButton.disabled = busy;
    const index = cells.indexOf(this);
    this.upButton.disabled = index <= 0;
    this.downButton.disabled = index < 0 || index >= cells.length - 1;
    this.node.classList.toggle("running", busy);
  }

  focus() {
    if (this.data.kind === "markdown" && !this.editing) this.markdownView.focus();
    else this.editor.focus();
    this.node.scrollIntoView({ block: "nearest" });
  }

  // --- markdown: the source while editing, the server's sanitised rendering otherwise
  edit(focus = true) {
    this.editing = true;
    this.editorBox.hidden = false;
    this.markdownView.hidden = true;
    this.renderButton.textContent = "Render";
    this.renderButton.setAttribute("aria-label", "render this markdown cell");
    if (focus) this.editor.focus();
  }

  showMarkdown() {
    this.editing = false;
    this.editorBox.hidden = true;
    this.markdownView.hidden = false;
    // Rendered and sanitised on the server (no raw HTML passes); never built from the source here.
    if (this.html) this.markdownView.replaceChildren(...markdownNodes(this.html));
    else this.markdownView.replaceChildren(el("p", { class: "muted" }, "Empty markdown cell: double-click to edit"));
    this.renderButton.textContent = "Edit";
    this.renderButton.setAttribute("aria-label", "edit this markdown cell");
  }

  async render() {
    try { await flush(); } catch (error) {
      message(`cell ${this.number} not rendered: ${error.message}`);
      return;
    }
    this.showMarkdown();
  }

  toggleEditing() {
    if (this.editing) this.render(); else this.edit();
  }

  // --- inputs: a chip per dataset or chained output, a picker to add a dataset
  has(ref) { return this.data.inputs.some((r) => r.kind === ref.kind && String(r.id) === String(ref.id)); }

  addInput(ref) {
    if (this.has(ref)) return false;
    this.data.inputs.push({ broken: false, fix: null, ...ref });
    this.renderInputs();
    changed();
    return true;
  }

  removeInput(ref) {
    this.data.inputs = this.data.inputs.filter((r) => r !== ref);
    this.renderInputs();
    changed();
  }

  replaceInput(ref, fix) {
    const index = this.data.inputs.indexOf(ref);
    this.data.inputs[index] = { kind: fix.kind, id: fix.id, name: fix.name, broken: false, fix: null };
    this.data.inputs = this.data.inputs.filter((r, i) => i === index || !(r.kind === fix.kind && String(r.id) === String(fix.id)));
    this.renderInputs();
    changed();
  }

  renderInputs() {
    const chips = this.data.inputs.map((ref) => inputChip(ref, {
      remove: () => this.removeInput(ref), replace: (fix) => this.replaceInput(ref, fix) }));
    const picker = datasetPicker("add a dataset as input", (dataset) => this.has({ kind: "dataset", id: dataset.id }),
      (dataset) => this.addInput({ kind: "dataset", id: dataset.id, name: dataset.name }));
    this.inputsBox.replaceChildren(el("span", { class: "inputs-label" }, "Inputs"), ...chips, picker);
  }

  // --- the chain of state: where this cell starts from, and whether its run is out of date
  setChain(stored) {
    this.chain = { stale: stored.stale, stale_why: stored.stale_why, starts_from: stored.starts_from,
      fresh_start: stored.fresh_start };
    this.renderChain();
  }

  renderChain() {
    const chain = this.chain;
    const stale = this.isCode && chain.stale;
    this.node.classList.toggle("stale", stale);
    this.staleBadge.hidden = !stale;
    this.staleBadge.title = stale ? chain.stale_why : "";
    if (!this.isCode) return;
    const from = chain.starts_from;
    this.chainLine.replaceChildren(from ? `starts from ${runWords(from)}` : "starts from nothing");
    if (!from && chain.fresh_start) this.chainLine.append(`: ${chain.fresh_start}`);
    if (stale) this.chainLine.append(" · ", el("span", { class: "stale-why" }, `stale: ${chain.stale_why}`));
  }

  // --- outputs an imported notebook had for this cell, shown until it runs here
  renderImported() {
    const shown = this.isCode && !this.data.last_run_id && this.imported.length > 0;
    this.importedBox.hidden = !shown;
    if (!shown) { this.importedBox.replaceChildren(); return; }
    this.importedBox.replaceChildren(
      el("p", { class: "small muted" }, "Outputs from the imported notebook (this cell has not run here yet):"),
      ...this.imported.map(importedNode));
  }
}

// An imported output: a stream or an error as text (never HTML; its colours as spans), anything
// else as a display.
function importedNode(output) {
  if (output.stream) {
    return appendAnsi(el("pre", { class: `stream ${output.stream === "stderr" ? "stderr" : "stdout"}` }), output.text || "");
  }
  if (output.error) {
    return appendAnsi(el("pre", { class: "stream stderr" }), output.text || `${output.error.ename}: ${output.error.evalue}`);
  }
  return displayNode(output);
}

// An input's chip: its name; when what it names is gone, "(deleted)" and a fix (the current
// dataset of the same name) or a remove button.
function inputChip(ref, { remove, replace }) {
  const label = ref.name || String(ref.id);
  const chip = el("span", { class: `chip chip-${ref.kind}${ref.broken ? " broken" : ""}`,
    title: ref.kind === "output" ? "an output of an earlier run" : "a dataset" },
    ref.kind === "output" ? el("span", { class: "chip-kind" }, "output ") : null, label);
  if (ref.broken) {
    chip.append(el("span", { class: "chip-broken" }, " (deleted)"));
    if (ref.fix) {
      chip.append(" ", el("button", { type: "button", class: "fix", onclick: () => replace(ref.fix) },
        `use current ${ref.fix.name}`));
    } else {
      chip.append(" ", el("button", { type: "button", class: "fix", onclick: remove }, "remove"));
    }
  }
  chip.append(el("button", { type: "button", class: "remove", "aria-label": `remove input ${label}`, onclick: remove }, "×"));
  return chip;
}

// "+ dataset…": the user's datasets not taken yet.
function datasetPicker(label, taken, add) {
  const picker = el("select", { class: "add-dataset", "aria-label": label }, el("option", { value: "" }, "+ dataset…"));
  for (const dataset of datasets.filter((d) => !taken(d))) picker.append(el("option", { value: dataset.id }, dataset.name));
  if (!datasets.length) picker.append(el("option", { value: "", disabled: true }, "no datasets yet (see Datasets)"));
  picker.addEventListener("change", () => {
    const dataset = datasets.find((d) => d.id === picker.value);
    if (dataset) add(dataset);
  });
  return picker;
}

// --- the notebook's own inputs ------------------------------------------------------------------

function renderNotebookInputs() {
  const input = (dataset) => ({ kind: "dataset", id: dataset.id, name: dataset.name, broken: false, fix: null });
  const taken = (dataset) => notebookInputs.some((ref) => String(ref.id) === String(dataset.id));
  const chips = notebookInputs.map((ref) => inputChip(ref, {
    remove: () => setNotebookInputs(notebookInputs.filter((r) => String(r.id) !== String(ref.id))),
    // The current dataset in the deleted one's place, once (it may be an input already).
    replace: (fix) => setNotebookInputs(notebookInputs.filter((r) => String(r.id) !== String(fix.id))
      .map((r) => (String(r.id) === String(ref.id) ? input(fix) : r))) }));
  const picker = datasetPicker("add a dataset to the notebook's inputs", taken,
    (dataset) => setNotebookInputs([...notebookInputs, input(dataset)]));
  document.getElementById("notebook-inputs").replaceChildren(
    el("span", { class: "inputs-label" }, "Notebook inputs"),
    el("span", { class: "muted small" }, "(every cell sees these under /input)"), ...chips, picker);
}

function setNotebookInputs(refs) {
  notebookInputs = refs;
  inputEdits += 1;
  renderNotebookInputs();
  changed();
}

// The server's word on the notebook's inputs: `whole` (a save's answer, with no change here since
// it was sent) takes its list as it is (a replaced dataset comes back as its current version);
// otherwise only what it says of the inputs this page has (each one's name, whether it is gone).
function adoptNotebookInputs(stored, { whole }) {
  const before = JSON.stringify(notebookInputs);
  if (whole) notebookInputs = stored.map((ref) => ({ ...ref }));
  else {
    const byId = new Map(stored.map((ref) => [String(ref.id), ref]));
    for (const ref of notebookInputs) {
      const known = byId.get(String(ref.id));
      if (known) Object.assign(ref, { name: known.name, broken: known.broken, fix: known.fix });
    }
  }
  if (JSON.stringify(notebookInputs) !== before) renderNotebookInputs();
}

// --- the notebook's variables: what a new cell at the end would start with ----------------------

// Drawn again only when the state changed; a frame the user opened stays open.
let variablesShown = "";
const openFrames = new Set();

function renderVariables(state) {
  const drawn = JSON.stringify(state);
  if (drawn === variablesShown) return;
  variablesShown = drawn;
  const variables = state.variables || [];
  document.getElementById("variables-count").textContent = variables.length ? `(${variables.length})` : "";
  const body = document.getElementById("variables-body");
  if (!variables.length) {
    body.replaceChildren(el("p", { class: "muted" }, "No variables yet: run a cell."));
    return;
  }
  const headings = ["Name", "Type", "Shape or length", "Size"].map((heading) => el("th", { scope: "col" }, heading));
  const parts = [el("p", { class: "small muted" }, `from ${runWords(state.starts_from)}, ${formatBytes(state.bytes)} in all`),
    el("div", { class: "table-scroll" }, el("table", { class: "table variables-table" },
      el("thead", {}, el("tr", {}, ...headings)), el("tbody", {}, ...variables.flatMap(variableRows))))];
  const modules = Object.entries(state.modules || {});
  if (modules.length) {
    parts.push(el("p", { class: "small muted" }, "modules: ", ...modules.flatMap(([alias, module], index) =>
      [index ? ", " : "", el("code", {}, alias), alias === module ? "" : ` (${module})`])));
  }
  if ((state.not_carried || []).length) {
    parts.push(el("p", { class: "small muted" }, "not carried: ", ...state.not_carried.flatMap((item, index) =>
      [index ? ", " : "", el("code", {}, item.name), item.why ? ` (${item.why})` : ""])));
  }
  body.replaceChildren(...parts);
}

// A variable's row; a data frame's has a button that opens its first rows in a row beneath.
function variableRows(variable) {
  const module = variable.module && variable.module !== "builtins" ? ` (${variable.module.split(".")[0]})` : "";
  const size = variable.shape ? variable.shape.join(" × ") : variable.length !== null && variable.length !== undefined
    ? `length ${variable.length}` : "";
  const nameCell = el("td", { class: "variable-name" }, el("code", {}, variable.name));
  const row = el("tr", { "data-name": variable.name }, nameCell, el("td", {}, `${variable.type}${module}`),
    el("td", {}, size), el("td", { class: "num" }, formatBytes(variable.bytes)));
  if (!variable.table) return [row];
  const open = openFrames.has(variable.name);
  const shown = el("tr", { class: "variable-table", hidden: !open },
    el("td", { colspan: "4" }, tableView(variable.table, { whole: "frame" })));
  const toggle = el("button", { type: "button", class: "link show-table", "aria-expanded": String(open),
    "aria-label": `show ${variable.name} as a table` }, "view table");
  toggle.addEventListener("click", () => {
    shown.hidden = !shown.hidden;
    toggle.setAttribute("aria-expanded", String(!shown.hidden));
    if (shown.hidden) openFrames.delete(variable.name); else openFrames.add(variable.name);
  });
  nameCell.append(" ", toggle);
  return [row, shown];
}

function renumberAll() {
  cells.forEach((cell) => cell.renumber());
}

function insertCell(index, data) {
  const cell = new Cell({ id: newId(), kind: "code", runtime, source: "", inputs: [], limits: {}, ...data });
  cells.splice(index, 0, cell);
  cellList.insertBefore(cell.node, cellList.children[index] || null);
  renumberAll();
  changed();
  return cell;
}

// A new code cell takes the notebook's runtime (not the cell above's).
function addCell(kind) {
  const index = cells.length;
  const cell = insertCell(index, { kind, runtime });
  if (kind === "markdown") cell.edit();
  cell.focus();
  return cell;
}

function focusNext(cell) {
  const index = cells.indexOf(cell);
  const next = cells[index + 1] || insertCell(index + 1, { kind: "code", runtime });
  next.focus();
}

function moveCell(cell, step) {
  const index = cells.indexOf(cell);
  const to = index + step;
  if (to < 0 || to >= cells.length) return;
  cells.splice(index, 1);
  cells.splice(to, 0, cell);
  cellList.replaceChildren(...cells.map((c) => c.node));
  renumberAll();
  changed();
  (step < 0 ? cell.upButton : cell.downButton).focus();
}

// A deleted cell is kept on the page (its editor, its run's view) until UNDO_KEPT newer deletions
// push it out: z in command mode, or the message's Undo, brings it back where it was; a save then
// gives it its last run again (the server checks that run is this notebook's run of that cell).
function deleteCell(cell, { ask = true } = {}) {
  const worth = cell.data.source.trim() || cell.data.last_run_id;
  if (ask && worth && !confirm(`Delete cell ${cell.number}? Its runs stay under Runs.`)) return;
  const index = cells.indexOf(cell);
  cells.splice(index, 1);
  cell.node.remove();
  if (selected === cell) selected = null;
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
  const near = cells[index] || cells[index - 1];
  if (near) { if (ask) near.focus(); else select(near); }
}

function undoDelete() {
  const last = deleted.pop();
  if (!last) { message("nothing deleted to bring back"); return; }
  const index = Math.min(last.index, cells.length);
  cells.splice(index, 0, last.cell);
  cellList.insertBefore(last.cell.node, cellList.children[index] || null);
  renumberAll();
  changed();
  message(`cell ${index + 1} is back`);
  select(last.cell);
}

// --- command mode -------------------------------------------------------------------------------

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
function select(cell, { focus = true } = {}) {
  if (selected && selected !== cell) selected.node.classList.remove("selected");
  selected = cell;
  cell.node.classList.add("selected");
  if (focus) {
    cell.node.focus({ preventScroll: true });
    cell.node.scrollIntoView({ block: "nearest" });
  }
}

function selectStep(cell, step) {
  const next = cells[cells.indexOf(cell) + step];
  if (next) select(next);
}

function addNear(cell, step) {
  const index = cells.indexOf(cell) + (step > 0 ? 1 : 0);
  select(insertCell(index, { kind: "code", runtime }));
}

function makeKind(cell, kind) {
  const want = kind === "markdown" ? "markdown" : cell.isCode ? cell.data.runtime : runtime;
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
  const cell = cells.find((c) => c.node === event.target);
  if (!cell || event.altKey) return;
  const mod = event.ctrlKey || event.metaKey;
  const key = event.key;
  let done = true;
  if (key === "Enter" && (event.shiftKey || mod)) {
    if (cell.isCode) runCell(cell); else cell.render();
    if (event.shiftKey) {
      const next = cells[cells.indexOf(cell) + 1];
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

function setUpCommandMode() {
  cellList.addEventListener("keydown", commandKey);
  document.getElementById("keys-list").replaceChildren(...COMMAND_KEYS.flatMap(([keys, what]) =>
    [el("dt", {}, el("kbd", {}, keys)), el("dd", {}, what)]));
}

function setUpRuntime(select) {
  select.value = runtime;
  select.addEventListener("change", () => {
    runtime = select.value;
    for (const cell of cells) cell.renderRuntime();
    changed();
  });
}

// The notebook's environment: its cells of that environment's runtime run in it from their next run.
function setUpEnvironment(select) {
  select.value = environment;
  select.addEventListener("change", () => {
    environment = select.value;
    changed();
  });
}

async function clearCell(cell) {
  try {
    await flush();
    const saved = await api("POST", `/notebooks/${notebookId}/cells/${cell.data.id}/clear`, {});
    if (!saver.inflight && saved.version > version) version = saved.version;
    cell.data.last_run_id = null;
    cell.view.reset();
    cell.showRun(null);
    cell.renderImported();
    refreshChain();  // the answer may predate a save still to come: read once the saves are done
  } catch (error) { message(`cell ${cell.number} not cleared: ${error.message}`); }
}

// "Use in next cell": the output becomes an input of the next code cell (a new one, with this
// cell's runtime: it reads what this cell wrote, when there is none); that cell keeps its own runtime.
function useInNextCell(cell, output) {
  const index = cells.indexOf(cell);
  let next = cells[index + 1];
  if (!next || !next.isCode) next = insertCell(index + 1, { kind: "code", runtime: cell.data.runtime });
  const base = output.name.split("/").pop();
  // A newer run's file of the same name replaces the older one: two inputs cannot share a name.
  const older = next.data.inputs.filter((ref) => ref.kind === "output" && ref.name === base && String(ref.id) !== String(output.id));
  next.data.inputs = next.data.inputs.filter((ref) => !older.includes(ref));
  const added = next.addInput({ kind: "output", id: output.id, name: base });
  if (older.length && !added) { next.renderInputs(); changed(); }
  const what = older.length ? `replaces the earlier ${base} as an input` : added ? "is an input" : "is already an input";
  message(`${base} ${what} of cell ${next.number}`);
  next.node.scrollIntoView({ block: "nearest" });
}

// --- running --------------------------------------------------------------------------------

// What the editor offers at the cursor (POST /complete: the state the cell would start from, the
// image's modules, the code above): null when the notebook is not on the server yet or the answer
// does not come, so the editor falls back to its own local names. The cell above is named too: a
// cell added and not saved yet starts from what that one leaves.
async function complete(cell, code, cursor) {
  if (!notebookId) return null;
  const above = cells[cells.indexOf(cell) - 1];
  const body = { cell_id: cell.data.id, code, cursor, ...(above ? { above_cell_id: above.data.id } : {}) };
  try {
    return await api("POST", `/notebooks/${notebookId}/complete`, body);
  } catch {
    return null;
  }
}

// Saves, then runs the cell as stored; resolves with the run's record when it ends, or with
// {outcome: null, reason} when it did not start.
async function runCell(cell) {
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

function runAll() { return runSequence(0, "Run all"); }
function runFrom(cell) { return runSequence(cells.indexOf(cell), `Run from cell ${cell.number}`); }

// Runs the code cells from `index` down, in order, each once the one above it has finished (its
// state is what the next starts from), and stops at the first that does not succeed. One
// sequence at a time: two would interleave and each cell would start from whichever ran last.
async function runSequence(index, label) {
  if (sequence !== null || index < 0) return;
  sequence = label;
  updateSequenceButtons();
  let ran = 0;
  try {
    for (const cell of cells.slice(index)) {
      if (!cell.isCode || !cells.includes(cell)) continue;
      message(`${label}: cell ${cell.number}…`);
      const run = await runCell(cell);
      if (run.outcome !== "succeeded") {
        const why = run.outcome ? `${run.outcome_text || run.outcome}${run.reason ? ` (${run.reason})` : ""}` : run.reason;
        message(`${label} stopped at cell ${cell.number}: ${why}`);
        cell.node.scrollIntoView({ block: "nearest" });
        return;
      }
      ran += 1;
    }
    message(`${label}: ${ran} code cell${ran === 1 ? "" : "s"} succeeded`);
  } finally {
    sequence = null;
    updateSequenceButtons();
  }
}

function updateSequenceButtons() {
  document.getElementById("run-all").disabled = sequence !== null;
  for (const cell of cells) cell.updateButtons();
}

// "Restart (clear state)": no run so far passes state down; the runs and their outputs stay (stale).
async function restart() {
  if (!confirm("Restart: every cell starts from nothing until the cells above run again. Outputs stay.")) return;
  const asked = chainAsked();
  try {
    applyChain(await api("POST", `/notebooks/${notebookId}/restart`, {}), asked);
    message("Restarted: every cell starts from nothing until the cells above it run again");
  } catch (error) { message(`not restarted: ${error.message}`); }
}

// --- the notebook list ------------------------------------------------------------------------

function renameInList(id, newName, count) {
  const item = document.querySelector(`#notebook-list li[data-id="${id}"]`);
  if (!item) return;
  item.querySelector(".notebook-link").textContent = newName;
  if (count !== undefined) item.querySelector(".cell-count").textContent = cellCount(count);
}

function cellCount(count) { return `${count} cell${count === 1 ? "" : "s"}`; }

function renderList(notebooks) {
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

async function createNotebook() {
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

async function duplicateNotebook() {
  try {
    await flush();
    const copy = await api("POST", `/notebooks/${notebookId}/duplicate`, {});
    navigate(`/notebooks/${copy.id}/`);
  } catch (error) { message(`not duplicated: ${error.message}`); }
}

async function deleteNotebook() {
  if (!confirm(`Delete the notebook "${name}" and its cells? Its runs stay under Runs.`)) return;
  try {
    await api("DELETE", `/notebooks/${notebookId}`);
    leaving = true;
    location.assign("/playground/");
  } catch (error) { message(`not deleted: ${error.message}`); }
}

async function importFile(file) {
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

function rename(input) {
  const value = input.value.replace(/\s+/g, " ").trim();
  if (!value) { input.value = name; return; }
  if (value === name) return;
  name = value;
  document.title = `${name} · Cordon`;
  renameInList(notebookId, name);
  changed();
}

// A file dragged anywhere over the page opens as a new notebook. Caught before the editors, which
// would otherwise paste a dropped file's text into a cell.
function setUpDrop() {
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

// --- start --------------------------------------------------------------------------------

async function start() {
  const [notebook, found, described, notebooks, egress] = await Promise.all([
    api("GET", `/notebooks/${notebookId}`), api("GET", "/datasets"), api("GET", "/limits"),
    api("GET", "/notebooks"), api("GET", "/egress")]);
  datasets = found;
  notebookInputs = notebook.inputs.map((ref) => ({ ...ref }));
  siteEgress = egress.ceiling;
  limitInfo = Object.fromEntries(described.map((limit) => [limit.name, limit]));
  name = notebook.name;
  version = notebook.version;
  runtime = notebook.runtime;
  environment = notebook.environment;
  renderList(notebooks);
  const nameInput = document.getElementById("notebook-name");
  nameInput.value = name;
  nameInput.addEventListener("change", () => rename(nameInput));
  nameInput.addEventListener("keydown", (event) => { if (event.key === "Enter") nameInput.blur(); });
  cells = [];
  for (const data of notebook.cells) {
    const cell = new Cell(data);
    cells.push(cell);
  }
  cellList.replaceChildren(...cells.map((cell) => cell.node));
  renumberAll();
  for (const cell of cells) cell.renderChain();  // now that every cell has its place
  renderNotebookInputs();
  renderVariables(notebook.state);
  // Each code cell shows its last run: the stored outcome, or the live stream of one still going.
  for (const cell of cells) if (cell.isCode && cell.data.last_run_id) cell.follow(cell.data.last_run_id);
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

start().catch((error) => message(`this notebook could not be loaded: ${error.message}`));
