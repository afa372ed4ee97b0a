// The run detail page: the live view, then the run's memory and CPU over time from its stored
// samples, [t_s, cpu_s, memory_bytes, file_bytes] each (memory_bytes: the program's own;
// file_bytes: what its files in /tmp and /output held; rows stored before file_bytes have three).
// uPlot: static/vendor/uplot.min.js, a classic script loaded before.

import { api, el } from "./cordon.js";
import { RunView } from "./run_view.js";
import { axisByteUnit, formatAxisSeconds, formatBytes, known } from "./format.js";

const MIB = 1048576;
const FIRST_SAMPLE_S = 0.05;  // the supervisor's first reading (runner/supervisor.py)

function draw(chart, detail) {
  const samples = detail.samples || [];
  const limitBytes = detail.limits ? detail.limits.memory_mib * MIB : null;
  const lastT = samples.length ? samples[samples.length - 1][0] : 0;
  const end = Math.max(known(detail.wall_s) ? detail.wall_s : 0, lastT) || FIRST_SAMPLE_S;
  const memories = samples.flatMap((s) => [s[2], s[3]]).filter(known);
  const top = Math.max(limitBytes || 0, ...memories, 1);
  const [unitName, unitSize] = axisByteUnit(top);
  const inUnit = (bytes) => (known(bytes) ? bytes / unitSize : null);
  const cpuTop = Math.max(...samples.map((s) => s[1]).filter(known), 0);
  // The x axis runs from the program's start to its end; the limit spans all of it.
  const rows = [[0, null, null, null], ...samples, [end, null, null, null]];
  const t = rows.map((s) => s[0]);
  const data = [
    t,
    rows.map((s) => inUnit(s[2])),
    rows.map((s) => inUnit(s[3])),
    t.map(() => inUnit(limitBytes)),
    rows.map((s) => (known(s[1]) ? s[1] : null)),
  ];
  const bytesValue = (u, value) => (known(value) ? formatBytes(Math.round(value * unitSize)) : "–");
  const timeValue = (u, value) => formatAxisSeconds(value, end);
  const cpuValue = (u, value) => formatAxisSeconds(value, cpuTop);
  const vm = detail.isolation === "vm";
  const options = {
    width: Math.min(chart.clientWidth || 700, 900),
    height: 260,
    scales: {
      x: { time: false, range: () => [0, end] },
      mem: { range: (u, min, max) => [0, Math.max(max, 0) * 1.08 || 1] },
      cpu: { range: (u, min, max) => [0, Math.max(max, 0.001) * 1.1] },
    },
    series: [
      { label: "time", value: timeValue },
      { label: vm ? "program memory (unknown in a VM)" : "program memory", scale: "mem", stroke: "#9b2c2c",
        fill: "rgba(155, 44, 44, 0.08)", width: 2, value: bytesValue },
      { label: "files in /tmp and /output", scale: "mem", stroke: "#2b6cb0", width: 2, value: bytesValue },
      { label: vm ? "memory limit (the guest's)" : "memory limit", scale: "mem", stroke: "#555", dash: [6, 4],
        width: 1, points: { show: false }, value: bytesValue },
      { label: "CPU time", scale: "cpu", stroke: "#0b6e4f", width: 1.5, value: cpuValue },
    ],
    axes: [
      { label: "time since the program started", values: (u, splits) => splits.map((v) => formatAxisSeconds(v, end)) },
      { scale: "mem", label: `memory (${unitName})`, size: 60, values: (u, splits) => splits.map((v) => +v.toFixed(2)) },
      { scale: "cpu", side: 1, label: "CPU time", size: 80, grid: { show: false },
        values: (u, splits) => splits.map((v) => formatAxisSeconds(v, cpuTop)) },
    ],
  };
  new uPlot(options, data, chart);
}

function noSamples(detail) {
  if (known(detail.wall_s) && detail.wall_s < FIRST_SAMPLE_S) {
    return `The program ran ${formatAxisSeconds(detail.wall_s, 0)}, less than the ` +
      `${formatAxisSeconds(FIRST_SAMPLE_S, 0)} before the first sample: its peak figures are above.`;
  }
  return "No resource samples recorded.";
}

// The Network section of a run that was still going when the page loaded: its egress record
// (the API's egress_record), listed as the page lists a finished run's.
function fillEgress(record) {
  const section = document.getElementById("egress");
  const pending = document.getElementById("egress-pending");
  if (!section || !section.dataset.pending || !pending) return;
  if (!record) { pending.textContent = "No egress record: the run ended before its proxy served it."; return; }
  const when = (at) => new Date(at * 1000).toISOString().slice(0, 19).replace("T", " ");
  const where = (a) => (a.host.includes(":") ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`);
  const totals = `${record.connections} connected · ${record.refused} refused · ${record.bytes_out} bytes out · ` +
    `${record.bytes_in} bytes in`;
  const rows = record.attempts.map((a) => el("tr", { class: a.allowed ? "egress-allowed" : "egress-refused" },
    el("td", {}, when(a.at)), el("td", {}, a.method), el("td", {}, el("code", {}, where(a))),
    el("td", {}, a.allowed ? "allowed" : "refused"), el("td", {}, a.reason), el("td", {}, el("code", {}, a.address)),
    el("td", { class: "num" }, a.bytes_out), el("td", { class: "num" }, a.bytes_in),
    el("td", { class: "num" }, a.seconds)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "9" }, "No attempts: the program reached for nothing.")));
  const head = ["time (UTC)", "method", "destination", "result", "reason", "address", "bytes out", "bytes in", "seconds"];
  pending.replaceWith(
    el("p", { class: "figures", id: "egress-totals" }, totals,
      record.limit ? el("strong", {}, ` · stopped: the run passed its egress cap (${record.limit})`) : null),
    el("table", { class: "table", id: "egress-attempts" },
      el("thead", {}, el("tr", {}, ...head.map((name) => el("th", {}, name)))), el("tbody", {}, ...rows)),
    record.attempts_not_kept ? el("p", { class: "muted small" },
      `${record.attempts_not_kept} later attempts were counted in the totals but not kept.`) : "");
  delete section.dataset.pending;
}

// The run, followed until it ends; then its chart and, if it was still going, its network record.
async function start() {
  const root = document.getElementById("run");
  const view = new RunView(document.getElementById("run-view"), { canStop: root.dataset.owned === "true", runPage: false });
  const run = await view.follow(root.dataset.runId);
  const chart = document.getElementById("chart");
  if (run.outcome === null) { chart.textContent = "This run is no longer stored."; return; }
  const detail = await api("GET", `/runs/${root.dataset.runId}`);
  fillEgress(detail.egress_record);
  if (detail.isolation === "vm") {
    document.getElementById("chart-note").textContent = "In a microVM the host sees the VM's memory, not the " +
      "program's: the program's own memory is unknown, and the limit is the guest's memory.";
  }
  if (!(detail.samples || []).length) { chart.textContent = noSamples(detail); return; }
  draw(chart, detail);
}

start();
