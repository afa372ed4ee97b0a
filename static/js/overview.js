// The audit console's overview: runs per hour by outcome as stacked bars (uPlot), from the
// JSON block #overview-data the page carries ({last_24h, last_7d}: {hours: [unix s], series:
// {outcome: [count per hour]}}). The tables beside each chart hold the same figures.
// uPlot: static/vendor/uplot.min.js, a classic script loaded before.

const COLOURS = {
  succeeded: "#2f855a", failed: "#c53030", timed_out: "#dd6b20", cpu_limit: "#b7791f",
  memory_limit: "#9b2c2c", output_limit: "#d69e2e", disk_limit: "#744210", process_limit: "#97266d",
  egress_limit: "#c05621",
  rejected_input: "#4a5568", rejected_capacity: "#718096", sandbox_error: "#553c9a", cancelled: "#a0aec0",
  unfinished: "#3182ce",
};

function draw(element, chart) {
  const outcomes = Object.keys(chart.series);
  if (!outcomes.length) { element.textContent = "No runs in this period."; return; }
  const raw = outcomes.map((outcome) => chart.series[outcome]);
  // Stacked: each series is drawn at the sum of itself and those below; the legend shows each
  // outcome's own count.
  let sums = chart.hours.map(() => 0);
  const stacked = raw.map((counts) => (sums = sums.map((sum, i) => sum + counts[i])));
  // One bar per hour that has runs (the current hour's too), from the hour's start to its end;
  // the outcomes stacked in it. uPlot draws series in order, so the tallest (the total) goes
  // first and each lower sum over it: the legend reads from the top of the stack down.
  const bars = uPlot.paths.bars({ size: [1, Infinity], align: 1, gap: 1 });
  const order = outcomes.map((_, index) => index).reverse();
  const series = [{ label: "hour" }];
  for (const index of order) {
    const colour = COLOURS[outcomes[index]] || "#333";
    series.push({
      label: outcomes[index], stroke: colour, width: 0, fill: colour, paths: bars,
      points: { show: false },
      value: (u, value, seriesIndex, dataIndex) => (dataIndex === null ? "–" : raw[index][dataIndex]),
    });
  }
  const hour = 3600;
  const options = {
    width: Math.max(240, Math.min(element.clientWidth || 700, 1000)),
    height: 240,
    series,
    // The x axis runs to the end of the last hour, so that its bar has its full width.
    scales: { x: { time: true, range: (u, min, max) => [min, max + hour] },
              y: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
    axes: [{}, { label: "runs per hour", size: 60 }],
  };
  new uPlot(options, [chart.hours, ...order.map((index) => stacked[index])], element);
}

const data = JSON.parse(document.getElementById("overview-data").textContent);
for (const element of document.querySelectorAll(".chart[data-span]")) {
  draw(element, data[element.dataset.span]);
}
