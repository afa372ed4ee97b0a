// One cell of the notebook (code or markdown): its bar, editor, inputs, limits, network, chain of
// state and last run; and the outputs an imported notebook had for it.
// CordonEditor: the CodeMirror bundle (static/vendor/codemirror.js), a classic script loaded before.

// LIMITS: the limits a cell offers
import { appendAnsi, displayNode, el, LIMITS, markdownNodes, message } from "../cordon.js";
import { RunView } from "../run_view.js";
import { egressRules, egressWords } from "../format.js";
import { refreshChain, runWords } from "./chain.js";
import { deleteCell, focusNext, moveCell, useInNextCell } from "./cells.js";
import { select } from "./command.js";
import { datasetPicker, inputChip } from "./inputs.js";
import { clearCell, complete, runCell, runFrom } from "./runs.js";
import { changed, flush } from "./saving.js";
import { page } from "./state.js";

const TYPES = [["python", "Python"], ["node", "JavaScript"], ["markdown", "Markdown"]];
const RUNTIME_WORDS = Object.fromEntries(TYPES);

export class Cell {
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

  get number() { return page.cells.indexOf(this) + 1; }
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
        "aria-label": "run from here: this cell, then each code cell below", onclick: () => runFrom(this) },
        "Run from here");
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
      if (page.siteEgress.length || this.data.egress.length) parts.push(this.networkBox());
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
    const other = this.isCode && this.data.runtime !== page.runtime;
    this.runtimeBadge.hidden = !other;
    this.runtimeBadge.textContent = other ? `${RUNTIME_WORDS[this.data.runtime]} cell` : "";
    this.runtimeBadge.title = other ? `this cell runs ${RUNTIME_WORDS[this.data.runtime]}; the notebook's new cells `
      + `are ${RUNTIME_WORDS[page.runtime]}` : "";
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
      const info = page.limitInfo[limit] || {};
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
    const allows = page.siteEgress.length ? "" : ": this cell's runs are refused until its destinations are removed";
    box.append(el("label", {}, "destinations, separated by commas or spaces ", input),
      el("p", { class: "muted" }, `This service allows ${egressWords(page.siteEgress)}${allows}.`));
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
    if (this.runFromButton) this.runFromButton.disabled = busy || page.sequence !== null;
    if (this.clearButton) this.clearButton.disabled = busy;
    const index = page.cells.indexOf(this);
    this.upButton.disabled = index <= 0;
    this.downButton.disabled = index < 0 || index >= page.cells.length - 1;
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
    this.data.inputs = this.data.inputs.filter((r, i) => i === index
      || !(r.kind === fix.kind && String(r.id) === String(fix.id)));
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
    return appendAnsi(el("pre", { class: `stream ${output.stream === "stderr" ? "stderr" : "stdout"}` }),
      output.text || "");
  }
  if (output.error) {
    return appendAnsi(el("pre", { class: "stream stderr" }),
      output.text || `${output.error.ename}: ${output.error.evalue}`);
  }
  return displayNode(output);
}
