// Shared browser code: API calls, safe ANSI rendering, and the live view of one run.
"use strict";

const Cordon = (() => {
  function csrf() {
    const match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  async function api(method, path, body) {
    const options = { method, headers: { "X-CSRFToken": csrf() }, credentials: "same-origin" };
    if (body instanceof FormData) options.body = body;
    else if (body !== undefined) {
      options.body = JSON.stringify(body);
      options.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(`/api${path}`, options);
    const data = response.status === 204 ? null : await response.json();
    if (!response.ok) throw Object.assign(new Error(data && data.message ? data.message : response.statusText), { data });
    return data;
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  // ANSI SGR colours become classes on spans; the text itself is only ever textContent.
  const ANSI = /\x1b\[([0-9;]*)m/g;
  function appendAnsi(target, text, state) {
    let last = 0;
    for (const match of text.matchAll(ANSI)) {
      addSpan(target, text.slice(last, match.index), state);
      for (const code of (match[1] || "0").split(";").map(Number)) {
        if (code === 0) { state.fg = null; state.bold = false; }
        else if (code === 1) state.bold = true;
        else if (code >= 30 && code <= 37) state.fg = code - 30;
        else if (code >= 90 && code <= 97) state.fg = code - 90;
        else if (code === 39) state.fg = null;
      }
      last = match.index + match[0].length;
    }
    addSpan(target, text.slice(last), state);
  }
  function addSpan(target, text, state) {
    if (!text) return;
    const span = document.createElement("span");
    if (state.fg !== null) span.classList.add(`ansi-${state.fg}`);
    if (state.bold) span.classList.add("ansi-bold");
    span.textContent = text;
    target.append(span);
  }

  // Offsets and lengths count UTF-8 bytes, as the stored log does, while a string counts UTF-16
  // units: what a message repeats is cut off by bytes. Messages hold whole characters, so the cut
  // falls between two of them.
  function dropBytes(text, count) {
    if (count <= 0) return text;
    return new TextDecoder().decode(new TextEncoder().encode(text).subarray(count));
  }

  // A run's states in order (playground.models.RunState): claimed = a worker took it and waits for
  // room on its host; admitted = the host's admission gave it room.
  const STATES = ["queued", "claimed", "admitted", "starting", "running", "exporting", "finished"];

  function describe(run) {
    const figures = [];
    if (run.wall_s !== null && run.wall_s !== undefined) figures.push(`wall ${run.wall_s.toFixed(2)} s`);
    figures.push(`CPU ${run.cpu_s === null || run.cpu_s === undefined ? "unknown" : run.cpu_s.toFixed(2) + " s"}`);
    const peak = run.peak_memory_bytes;
    figures.push(`peak memory ${peak === null || peak === undefined ? "unknown" : (peak / 1048576).toFixed(1) + " MiB"}`);
    figures.push(`stdout ${run.stdout_bytes} B${run.stdout_truncated ? " (truncated)" : ""}`);
    figures.push(`stderr ${run.stderr_bytes} B${run.stderr_truncated ? " (truncated)" : ""}`);
    return figures.join(" · ");
  }

  // Where a finished run's time went (the run detail's `timings`); boot only for a microVM.
  function describeTimings(timings) {
    if (!timings) return "";
    const parts = [];
    for (const [name, label] of [["start_s", "start"], ["boot_s", "boot"], ["total_s", "total"]]) {
      const seconds = timings[name];
      if (seconds !== null && seconds !== undefined) parts.push(`${label} ${seconds.toFixed(2)} s`);
    }
    return parts.join(" · ");
  }

  // The live view of one run: state progress, output panes, outcome and figures, outputs.
  // Its socket's messages (chunk, state, final) are described in playground/live.py.
  class RunView {
    constructor(root, { onOutputs } = {}) {
      this.root = root;
      this.onOutputs = onOutputs;
      this.progress = el("ol", { class: "progress" }, ...STATES.map((s) => el("li", { "data-state": s }, s)));
      this.badge = el("span", { class: "badge" }, "");
      this.reason = el("span", { class: "reason" }, "");
      this.out = el("pre", { class: "stream stdout", "aria-label": "standard output" });
      this.err = el("pre", { class: "stream stderr", "aria-label": "standard error" });
      this.figures = el("p", { class: "figures" }, "");
      this.timings = el("p", { class: "figures timings" }, "");
      this.outputs = el("ul", { class: "outputs" });
      root.replaceChildren(this.progress, el("p", {}, this.badge, " ", this.reason), this.out, this.err,
                           this.figures, this.timings, this.outputs);
    }

    async follow(runId) {
      this.runId = runId;
      this.offsets = { stdout: 0, stderr: 0 };
      this.ansi = { stdout: { fg: null, bold: false }, stderr: { fg: null, bold: false } };
      this.finished = false;
      this.out.textContent = "";
      this.err.textContent = "";
      this.badge.textContent = "";
      this.reason.textContent = "";
      this.figures.textContent = "";
      this.timings.textContent = "";
      this.outputs.replaceChildren();
      this.setState("queued");
      return new Promise((resolve) => { this.resolve = resolve; this.connect(); });
    }

    connect() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const query = `stdout=${this.offsets.stdout}&stderr=${this.offsets.stderr}`;
      const socket = new WebSocket(`${scheme}://${location.host}/ws/runs/${this.runId}/?${query}`);
      socket.onmessage = (event) => this.handle(JSON.parse(event.data));
      socket.onclose = () => { if (!this.finished) setTimeout(() => this.resync(), 500); };
      this.socket = socket;
    }

    handle(message) {
      if (message.type === "chunk") this.chunk(message);
      else if (message.type === "state") this.setState(message.state);
      else if (message.type === "final") this.finish();
    }

    chunk(message) {
      const have = this.offsets[message.stream];
      if (message.offset > have) { this.socket.close(); return; }  // a gap: resync from the stored log
      const skip = have - message.offset;
      const text = dropBytes(message.data, skip);
      if (!text && message.length <= skip) return;  // a repeat
      appendAnsi(message.stream === "stdout" ? this.out : this.err, text, this.ansi[message.stream]);
      this.offsets[message.stream] = Math.max(have, message.offset + message.length);
    }

    async resync() {
      for (const stream of ["stdout", "stderr"]) {
        for (;;) {
          const log = await api("GET", `/runs/${this.runId}/log?stream=${stream}&offset=${this.offsets[stream]}`);
          if (log.next_offset === this.offsets[stream]) break;
          appendAnsi(stream === "stdout" ? this.out : this.err, log.data, this.ansi[stream]);
          this.offsets[stream] = log.next_offset;
        }
      }
      const run = await api("GET", `/runs/${this.runId}`);
      if (run.state === "finished") this.finish(run); else this.connect();
    }

    setState(state) {
      const reached = STATES.indexOf(state);
      for (const item of this.progress.children) {
        item.classList.toggle("done", STATES.indexOf(item.dataset.state) <= reached);
      }
      this.root.dataset.state = state;
    }

    async finish(known) {
      if (this.finished) return;
      this.finished = true;
      if (this.socket) this.socket.close();
      const run = known || await api("GET", `/runs/${this.runId}`);
      await this.catchUp(run);
      this.setState("finished");
      this.badge.textContent = run.outcome;
      this.badge.className = `badge outcome-${run.outcome}`;
      this.reason.textContent = run.reason;
      this.figures.textContent = describe(run);
      this.timings.textContent = describeTimings(run.timings);
      this.root.dataset.outcome = run.outcome;
      for (const output of run.outputs) {
        const item = el("li", {}, el("a", { href: output.url, download: "" }, output.name), ` ${output.size} B`);
        if (this.onOutputs) item.append(" ", el("button", { type: "button", class: "use-output",
          onclick: () => this.onOutputs(output) }, "Use in next cell"));
        this.outputs.append(item);
      }
      this.resolve(run);
    }

    async catchUp(run) {
      for (const stream of ["stdout", "stderr"]) {
        const total = stream === "stdout" ? run.stdout_bytes : run.stderr_bytes;
        while (this.offsets[stream] < total) {
          const log = await api("GET", `/runs/${this.runId}/log?stream=${stream}&offset=${this.offsets[stream]}`);
          if (log.next_offset === this.offsets[stream]) break;
          appendAnsi(stream === "stdout" ? this.out : this.err, log.data, this.ansi[stream]);
          this.offsets[stream] = log.next_offset;
        }
      }
    }
  }

  return { api, el, RunView, describe, describeTimings };
})();
