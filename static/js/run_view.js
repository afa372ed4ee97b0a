// The live view of one run (used by the notebook's cells, the run detail page and an assignment's
// Run button): its state, output panes fed by the run's socket, outcome, figures and outputs, and
// what a notebook cell leaves for the cell below.

import { api, appendAnsi, displayNode, el, pathPart, tableView } from "./cordon.js";
import { describe, describeTimings, formatBytes, known } from "./format.js";
import { LiveBatcher, chunkNews } from "./run_output.js";

// --- what a notebook cell leaves for the next ------------------------------------------------

const code = (name) => el("code", {}, name);

// "`fh` (open file), `t` (thread)": names, each with why, as nodes for a sentence.
function namesWithWhy(items) {
  const nodes = [];
  items.forEach((item, index) => {
    if (index) nodes.push(", ");
    nodes.push(code(item.name), item.why ? ` (${item.why})` : "");
  });
  return nodes;
}

// What a finished cell leaves for the cell below it (the run detail's `cell`): lines of nodes. A
// failed cell passes on what it bound before its error, as a kernel keeps it; one a limit stopped
// (or whose state could not be written) passes nothing.
function cellStateLines(run) {
  const cell = run.cell;
  const lines = [];
  const count = cell.variables.length + Object.keys(cell.modules || {}).length;  // imports carry too
  const state = `${formatBytes(cell.state_bytes)}, ${count} name${count === 1 ? "" : "s"}`;
  if (!known(cell.state_bytes)) {
    lines.push([run.outcome === "succeeded"
      ? "no state kept for the next cell: the cell below starts from the state before this one"
      : "no state kept: the next cell starts from the state before this one"]);
  } else if (run.outcome === "succeeded") {
    lines.push([`State for the next cell: ${state}`]);
  } else {
    const line = cell.error && Number.isInteger(cell.error.line) ? ` at line ${cell.error.line}` : "";
    lines.push([`Failed${line}; what it defined before that carries to the next cell: ${state}`]);
  }
  const files = cell.files || [];
  if (files.length) {
    const named = files.map((file) => ({ name: file.name, why: formatBytes(file.bytes) }));
    lines.push([`file${files.length === 1 ? "" : "s"} in /tmp carried too: `, ...namesWithWhy(named)]);
  }
  if (cell.not_carried.length) lines.push(["not carried to the next cell: ", ...namesWithWhy(cell.not_carried)]);
  const failed = (cell.restored && cell.restored.failed) || [];
  if (failed.length) lines.push(["could not be restored from the cell above: ", ...namesWithWhy(failed)]);
  if (cell.displays_note) lines.push([cell.displays_note]);  // why: the cell's budget, a manifest not read
  else if (cell.displays_dropped) {
    lines.push([`${cell.displays_dropped} more display${cell.displays_dropped === 1 ? "" : "s"} not shown`]);
  }
  return lines.map((parts) => el("p", {}, ...parts));
}

// --- one run, live ------------------------------------------------------------------------

// A run's states in order (playground.models.RunState): claimed = a worker took it and waits for
// room on its host; admitted = the host's admission gave it room.
const STATES = ["queued", "claimed", "admitted", "starting", "running", "exporting", "finished"];
const GONE = 4404;  // the socket's close code for a run this user cannot see (or that is gone)

// The requests a run's egress proxy refused, each with its reason (a private address, a name
// outside the policy...), said where the run's output is: the first few, and how many more.
const REFUSED_SHOWN = 5;
function refusedItems(record) {
  const refused = ((record && record.attempts) || []).filter((attempt) => !attempt.allowed);
  const items = refused.slice(0, REFUSED_SHOWN).map((attempt) =>
    el("li", {}, `refused ${attempt.method} ${attempt.host}:${attempt.port}: ${attempt.reason}`));
  if (refused.length > REFUSED_SHOWN) items.push(el("li", { class: "muted" }, `and ${refused.length - REFUSED_SHOWN} more (on the run page)`));
  return items;
}

// The live view of one run: state progress, a Stop button while it is active, output panes,
// outcome and figures, outputs (images inline, tables previewed, every one downloadable).
// Its socket's messages (chunk, state, final) are described in playground/live.py. follow()
// works the same for a finished run (it shows the stored record) and for a live one.
export class RunView {
  // canStop: false where the viewer may not cancel the run (staff on another user's run page);
  // runPage: false on the run's own page (elsewhere a finished run links to it).
  constructor(root, { onOutputs, onActive, canStop = true, runPage = true } = {}) {
    this.root = root;
    this.canStop = canStop;
    this.runPage = runPage;
    this.onOutputs = onOutputs;
    this.onActive = onActive;
    this.generation = 0;
    this.progress = el("ol", { class: "progress", "aria-label": "run state" },
      ...STATES.map((s) => el("li", { "data-state": s }, s)));
    this.badge = el("span", { class: "badge" }, "");
    this.reason = el("span", { class: "reason", role: "status" }, "");
    this.stop = el("button", { type: "button", class: "stop", hidden: true, "aria-label": "stop this run",
      onclick: () => this.cancel() }, "Stop");
    this.out = el("pre", { class: "stream stdout", "aria-label": "standard output" });
    this.err = el("pre", { class: "stream stderr", "aria-label": "standard error" });
    this.figures = el("p", { class: "figures" }, "");
    this.timings = el("p", { class: "figures timings" }, "");
    this.outputs = el("ul", { class: "outputs", "aria-label": "output files" });
    this.refused = el("ul", { class: "egress-refused", "aria-label": "network requests refused" });
    // A notebook cell's run: what it displayed, and what it leaves for the cell below.
    this.displays = el("div", { class: "displays", "aria-label": "displays" });
    this.cellState = el("div", { class: "cell-state small muted", "aria-label": "state for the next cell" });
    this.links = el("p", { class: "small run-links" });
    this.live = new LiveBatcher((stream, text) => appendAnsi(stream === "stdout" ? this.out : this.err, text,
      this.ansi[stream]), (draw) => requestAnimationFrame(draw));
    root.replaceChildren(this.progress, el("p", { class: "run-status" }, this.stop, this.badge, " ", this.reason),
      this.out, this.err, this.displays, this.refused, this.figures, this.timings, this.outputs, this.cellState,
      this.links);
    root.hidden = true;
  }

  // Shows run `runId` until it ends; resolves with its record ({outcome: null, ...} when it
  // can no longer be read).
  follow(runId) {
    this.reset();
    this.root.hidden = false;
    this.runId = runId;
    this.setActive(true);
    this.setState("queued");
    return new Promise((resolve) => { this.resolve = resolve; this.connect(this.generation); });
  }

  // Empty again (a cleared cell); a run being followed is let go, not stopped.
  reset() {
    this.generation += 1;
    if (this.socket) this.socket.close();
    if (this.resolve) this.resolve({ outcome: null, reason: "cleared" });
    this.socket = null;
    this.resolve = null;
    this.runId = null;
    this.live.clear();
    this.offsets = { stdout: 0, stderr: 0 };
    this.ansi = { stdout: { fg: null, bold: false }, stderr: { fg: null, bold: false } };
    if (this.stderrToggle) { this.stderrToggle.remove(); this.stderrToggle = null; }
    this.err.classList.remove("whole");
    this.finished = false;
    this.retryMs = 500;
    for (const node of [this.out, this.err, this.badge, this.reason, this.figures, this.timings]) node.textContent = "";
    this.badge.className = "badge";
    this.outputs.replaceChildren();
    this.displays.replaceChildren();
    this.cellState.replaceChildren();
    this.refused.replaceChildren();
    this.links.replaceChildren();
    delete this.root.dataset.outcome;
    delete this.root.dataset.state;
    this.setActive(false);
    this.root.hidden = true;
  }

  // A message instead of a run (one that could not start).
  say(text) {
    this.reset();
    this.root.hidden = false;
    this.reason.textContent = text;
  }

  setActive(active) {
    this.active = active;
    this.stop.hidden = !active || !this.canStop;
    this.stop.disabled = false;
    if (this.onActive) this.onActive(active);
  }

  async cancel() {
    if (!this.runId || this.finished) return;
    this.stop.disabled = true;
    this.reason.textContent = "stopping…";
    try {
      await api("POST", `/runs/${this.runId}/cancel`);
    } catch (error) {
      this.stop.disabled = false;
      this.reason.textContent = `could not stop: ${error.message}`;
    }
  }

  connect(generation) {
    if (generation !== this.generation) return;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const query = `stdout=${this.offsets.stdout}&stderr=${this.offsets.stderr}`;
    const socket = new WebSocket(`${scheme}://${location.host}/ws/runs/${this.runId}/?${query}`);
    socket.onmessage = (event) => { if (generation === this.generation) this.handle(JSON.parse(event.data)); };
    socket.onclose = (event) => {
      if (generation !== this.generation || this.finished) return;
      if (event.code === GONE) this.gone();
      else setTimeout(() => this.resync(generation), this.retryMs);
    };
    this.socket = socket;
  }

  handle(message) {
    if (message.type === "chunk") this.chunk(message);
    else if (message.type === "state") this.setState(message.state);
    else if (message.type === "final") this.finish();
  }

  chunk(message) {
    const news = chunkNews(this.offsets[message.stream], message);
    if (!news) { this.socket.close(); return; }  // a gap: resync from the stored log
    this.live.add(message.stream, news.text);  // drawn with the others of this frame
    this.offsets[message.stream] = news.shown;
  }

  // After the socket closed: read what it missed from the stored log, then finish or reconnect.
  // A failed read (the server restarting, the network gone) is tried again, more slowly.
  async resync(generation) {
    if (generation !== this.generation) return;
    try {
      await this.readLog(generation, Infinity);
      const run = await api("GET", `/runs/${this.runId}`);
      if (generation !== this.generation) return;
      this.retryMs = 500;
      if (run.state === "finished") this.finish(run); else this.connect(generation);
    } catch (error) {
      if (generation !== this.generation) return;
      if (error.status === 404) { this.gone(); return; }
      this.reason.textContent = `reconnecting… (${error.message})`;
      this.retryMs = Math.min(this.retryMs * 2, 10000);
      setTimeout(() => this.resync(generation), this.retryMs);
    }
  }

  async readLog(generation, totals) {
    this.live.drain();  // what the socket brought first, then the stored log after it
    for (const stream of ["stdout", "stderr"]) {
      const total = totals === Infinity ? Infinity : totals[stream];
      while (this.offsets[stream] < total) {
        const log = await api("GET", `/runs/${this.runId}/log?stream=${stream}&offset=${this.offsets[stream]}`);
        if (generation !== this.generation || log.next_offset === this.offsets[stream]) break;
        appendAnsi(stream === "stdout" ? this.out : this.err, log.data, this.ansi[stream]);
        this.offsets[stream] = log.next_offset;
      }
    }
  }

  gone() {
    this.finished = true;
    this.setActive(false);
    this.setState("finished");
    this.reason.textContent = "this run is no longer stored";
    this.root.dataset.outcome = "gone";
    this.settle({ outcome: null, reason: "this run is no longer stored" });
  }

  setState(state) {
    const reached = STATES.indexOf(state);
    for (const item of this.progress.children) {
      item.classList.toggle("done", STATES.indexOf(item.dataset.state) <= reached);
    }
    this.root.dataset.state = state;
  }

  async finish(record) {
    if (this.finished) return;
    this.finished = true;
    const generation = this.generation;
    if (this.socket) this.socket.close();
    let run = record;
    try {
      if (!run) run = await api("GET", `/runs/${this.runId}`);
      await this.readLog(generation, { stdout: run.stdout_bytes, stderr: run.stderr_bytes });
    } catch {
      // No record yet: try again later. A record but a failed log read: the record is shown, with
      // as much of the log as was read.
      if (generation !== this.generation) return;
      if (!run) { this.finished = false; setTimeout(() => this.resync(generation), this.retryMs); return; }
    }
    if (generation !== this.generation) return;
    this.setActive(false);
    this.setState("finished");
    this.badge.textContent = run.outcome_text || run.outcome;
    this.badge.title = run.outcome || "";
    this.badge.className = `badge outcome-${run.outcome}`;
    this.reason.textContent = run.reason;
    this.figures.textContent = describe(run);
    this.timings.textContent = describeTimings(run.timings);
    this.outputs.replaceChildren(...run.outputs.map((output) => this.outputItem(output)));
    this.displays.replaceChildren(...(run.displays || []).map(displayNode));
    this.cellState.replaceChildren(...(run.cell ? cellStateLines(run) : []));
    this.root.dataset.outcome = run.outcome;
    this.refused.replaceChildren(...refusedItems(run.egress_record));
    if (this.runPage) {
      this.links.replaceChildren(el("a", { href: `/runs/${this.runId}/` }, "Run page"),
        " (timeline, memory and CPU chart, network record)");
    }
    if (run.outcome !== "succeeded") this.showEndOfStderr();
    this.settle(run);
  }

  // A failed run's point is at the end of its stderr (the exception under its traceback): the
  // pane shows its end, and the whole of it is a click away.
  showEndOfStderr() {
    const pane = this.err;
    if (!pane.textContent) return;
    pane.scrollTop = pane.scrollHeight;
    if (pane.scrollHeight <= pane.clientHeight || this.stderrToggle) return;
    this.stderrToggle = el("button", { type: "button", class: "link stderr-toggle", "aria-expanded": "false",
      onclick: () => {
        const whole = pane.classList.toggle("whole");
        this.stderrToggle.setAttribute("aria-expanded", String(whole));
        this.stderrToggle.textContent = whole ? "Show the end of stderr" : "Show all of stderr";
        if (!whole) pane.scrollTop = pane.scrollHeight;
      } }, "Show all of stderr");
    pane.before(this.stderrToggle);
  }

  settle(run) {
    const resolve = this.resolve;
    this.resolve = null;
    if (resolve) resolve(run);
  }

  outputItem(output) {
    const name = output.name;
    const item = el("li", { class: "output", "data-kind": output.kind || "file", "data-name": name });
    const line = el("div", { class: "output-line" });
    line.append(output.url ? el("a", { href: output.url, download: "" }, name) : el("span", {}, `${name} (not kept)`),
      el("span", { class: "muted" }, ` ${formatBytes(output.size)}`));
    item.append(line);
    if (output.kind === "table" && output.url) {
      const box = el("div", { class: "output-preview", hidden: true });
      const toggle = el("button", { type: "button", class: "preview-toggle", "aria-expanded": "false",
        "aria-label": `preview ${name}` }, "Preview");
      toggle.addEventListener("click", () => this.togglePreview(toggle, box, name));
      line.append(" ", toggle);
      item.append(box);
    }
    if (this.onOutputs && output.url) {
      line.append(" ", el("button", { type: "button", class: "use-output", "aria-label": `use ${name} in the next cell`,
        onclick: () => this.onOutputs(output) }, "Use in next cell"));
    }
    if (output.kind === "image" && output.inline_url) {
      item.append(el("img", { class: "output-image", src: output.inline_url, alt: name, loading: "lazy" }));
    }
    return item;
  }

  async togglePreview(toggle, box, name) {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    box.hidden = !open;
    if (!open || box.dataset.loaded) return;
    box.replaceChildren(el("p", { class: "muted" }, "loading…"));
    try {
      const preview = await api("GET", `/runs/${this.runId}/outputs/${pathPart(name)}/preview`);
      box.replaceChildren(tableView(preview));
      box.dataset.loaded = "1";
    } catch (error) {
      box.replaceChildren(el("p", { class: "error" }, `no preview: ${error.message}`));
    }
  }
}
