// The run detail page: the live view, and CPU and memory over time from the stored samples.
"use strict";

(async () => {
  const { api, RunView } = Cordon;
  const root = document.getElementById("run");
  const runId = root.dataset.runId;
  const view = new RunView(document.getElementById("run-view"));
  const run = await view.follow(runId);
  const detail = await api("GET", `/runs/${run.id}`);
  const samples = detail.samples || [];
  const chart = document.getElementById("chart");
  if (!samples.length) { chart.textContent = "no resource samples recorded"; return; }
  const t = samples.map((s) => s[0]);
  const cpu = samples.map((s) => s[1]);
  const mem = samples.map((s) => (s[2] === null ? null : s[2] / 1048576));
  new uPlot({ width: Math.min(chart.clientWidth || 700, 900), height: 240, scales: { x: { time: false } },
    series: [{ label: "seconds" }, { label: "CPU s", stroke: "#0b6e4f", scale: "cpu" },
             { label: "memory MiB", stroke: "#9b2c2c", scale: "mib" }],
    axes: [{}, { scale: "cpu", label: "CPU s" }, { scale: "mib", side: 1, label: "MiB" }] }, [t, cpu, mem], chart);
})();
