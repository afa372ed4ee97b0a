// The audit console's overview: runs per hour by outcome as stacked areas (uPlot), from the
// JSON block #overview-data the page carries ({last_24h, last_7d}: {hours: [unix s], series:
// {outcome: [count per hour]}}). The tables beside each chart hold the same figures.
"use strict";

(() => {
  const COLOURS = {
    succeeded: "#2f855a", failed: "#c53030", timed_out: "#dd6b20", cpu_limit: "#b7791f",
    memory_limit: "#9b2c2c", output_limit: "#d69e2e", disk_limit: "#744210", process_limit: "#97266d",
    egress_limit: "#c05621",
    rejected_input: "#4a5568", rejected_capacity: "#718096", sandbox_error: "#553c9a", cancelled: "#a0aec0",
    unfinished: "#3182ce",
  };

  function withAlpha(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  function draw(element, chart) {
    const outcomes = Object.keys(chart.series);
    if (!outcomes.length) { element.textContent = "No runs in this period."; return; }
    const raw = outcomes.map((outcome) => chart.series[outcome]);
    // Stacked: each series is drawn at the sum of itself and those below; a band fills between
    // neighbours, and the legend shows each outcome's own count.
    let sums = chart.hours.map(() => 0);
    const stacked = raw.map((counts) => (sums = sums.map((sum, i) => sum + counts[i])));
    const series = [{ label: "hour" }];
    const bands = [];
    outcomes.forEach((outcome, index) => {
      const colour = COLOURS[outcome] || "#333";
      series.push({
        // Each hour's count holds until the next hour starts.
        label: outcome, stroke: colour, width: 1, points: { show: false }, paths: uPlot.paths.stepped({ align: 1 }),
        fill: index === 0 ? withAlpha(colour, 0.35) : undefined,
        value: (u, value, seriesIndex, dataIndex) => (dataIndex === null ? "–" : raw[seriesIndex - 1][dataIndex]),
      });
      if (index > 0) bands.push({ series: [index + 1, index], fill: withAlpha(colour, 0.35) });
    });
    const options = {
      width: Math.max(320, Math.min(element.clientWidth || 700, 1000)),
      height: 240,
      series,
      bands,
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
      axes: [{}, { label: "runs per hour", size: 60 }],
    };
    new uPlot(options, [chart.hours, ...stacked], element);
  }

  const data = JSON.parse(document.getElementById("overview-data").textContent);
  for (const element of document.querySelectorAll(".chart[data-span]")) {
    draw(element, data[element.dataset.span]);
  }
})();
