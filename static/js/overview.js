// The audit console's overview: the runs of the chosen range by outcome as stacked bars (uPlot),
// from the JSON block #overview-data the page carries ({starts: [unix s], bucket_s, series:
// {outcome: [count per bucket]}, runs_url}). A click on a bar opens its runs in the run list
// (filtered to its bucket); the table beside the chart holds the same figures, each linked.
// uPlot: static/vendor/uplot.min.js, a classic script loaded before.

const COLOURS = {
  succeeded: "#2f855a", failed: "#c53030", timed_out: "#dd6b20", cpu_limit: "#b7791f",
  memory_limit: "#9b2c2c", output_limit: "#d69e2e", disk_limit: "#744210", process_limit: "#97266d",
  egress_limit: "#c05621",
  rejected_input: "#4a5568", rejected_capacity: "#718096", sandbox_error: "#553c9a", cancelled: "#a0aec0",
  unfinished: "#3182ce",
};
const UNITS = { 300: "5 minutes", 3600: "hour", 86400: "day" };

// The run list filtered to the runs created in one bucket.
export function bucketUrl(base, start, width) {
  const iso = (seconds) => new Date(seconds * 1000).toISOString();
  const query = new URLSearchParams({ created_at__gte: iso(start), created_at__lt: iso(start + width) });
  return `${base}?${query}`;
}

function draw(element, chart) {
  const outcomes = Object.keys(chart.series);
  if (!outcomes.length) { element.textContent = "No runs in this range."; return; }
  const raw = outcomes.map((outcome) => chart.series[outcome]);
  // Stacked: each series is drawn at the sum of itself and those below; the legend shows each
  // outcome's own count.
  let sums = chart.starts.map(() => 0);
  const stacked = raw.map((counts) => (sums = sums.map((sum, i) => sum + counts[i])));
  // One bar per bucket that has runs (the current one's too), from the bucket's start to its end;
  // the outcomes stacked in it. uPlot draws series in order, so the tallest (the total) goes
  // first and each lower sum over it: the legend reads from the top of the stack down.
  const bars = uPlot.paths.bars({ size: [1, Infinity], align: 1, gap: 1 });
  const order = outcomes.map((_, index) => index).reverse();
  const series = [{ label: "at" }];
  for (const index of order) {
    const colour = COLOURS[outcomes[index]] || "#333";
    series.push({
      label: outcomes[index], stroke: colour, width: 0, fill: colour, paths: bars,
      points: { show: false },
      value: (u, value, seriesIndex, dataIndex) => (dataIndex === null ? "–" : raw[index][dataIndex]),
    });
  }
  const width = chart.bucket_s;
  const options = {
    width: Math.max(240, Math.min(element.clientWidth || 700, 1000)),
    height: 240,
    series,
    // The x axis runs to the end of the last bucket, so that its bar has its full width.
    scales: { x: { time: true, range: (u, min, max) => [min, max + width] },
              y: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
    axes: [{}, { label: `runs per ${UNITS[width] || `${width} s`}`, size: 60 }],
  };
  const plot = new uPlot(options, [chart.starts, ...order.map((index) => stacked[index])], element);
  // A click on a bucket with runs opens them; the pointer says which do.
  const bucketAt = () => {
    const index = plot.cursor.idx;
    return index === null || index === undefined || !sums[index] ? null : chart.starts[index];
  };
  plot.over.addEventListener("mousemove", () => { plot.over.style.cursor = bucketAt() === null ? "" : "pointer"; });
  plot.over.addEventListener("click", () => {
    const start = bucketAt();
    if (start !== null) location.assign(bucketUrl(chart.runs_url, start, width));
  });
}

const block = typeof document === "undefined" ? null : document.getElementById("overview-data");
if (block) draw(document.getElementById("chart-range"), JSON.parse(block.textContent));
