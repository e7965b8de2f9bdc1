// Draw the charts of a page from the data the server put beside each canvas (json_script), with Chart.js
// served by the portal itself. What a chart plots is copied to the canvas's data-plotted attribute, so a test
// can check the data the chart holds rather than pixels.
(function () {
  "use strict";
  if (typeof Chart === "undefined") return;
  const COLORS = ["#2457c5", "#c2410c", "#15803d", "#7c3aed", "#0e7490", "#b45309"];
  document.querySelectorAll("canvas[data-chart]").forEach((canvas) => {
    const source = document.getElementById(canvas.dataset.chart);
    if (!source) return;
    const spec = JSON.parse(source.textContent);
    // Over time: a linear x axis of Unix milliseconds (no date adapter needed), so a gap in the samples is
    // drawn as a gap and the ticks are wall-clock times; otherwise categories (a histogram's bins, names).
    const timed = Array.isArray(spec.times);
    const span = timed && spec.times.length ? spec.times[spec.times.length - 1] - spec.times[0] : 0;
    const x = timed ? {
      type: "linear", min: spec.times[0], max: spec.times[spec.times.length - 1],
      afterBuildTicks: (scale) => { scale.ticks = roundTicks(scale.min, scale.max); },
      ticks: { callback: (v) => clock(v, span) },
    } : { type: "category" };
    const chart = new Chart(canvas, {
      type: spec.type,
      data: {
        labels: timed ? undefined : spec.labels,
        datasets: spec.datasets.map((d, i) => ({
          label: d.label, data: timed ? d.data.map((y, j) => ({ x: spec.times[j], y: y })) : d.data,
          borderColor: COLORS[i % COLORS.length], spanGaps: false,
          backgroundColor: COLORS[i % COLORS.length] + (spec.type === "bar" ? "cc" : "33"),
          pointRadius: 0, borderWidth: 2, tension: 0.2,
        })),
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: "index", intersect: false },
        scales: { x: x, y: { beginAtZero: true, title: { display: !!spec.unit, text: spec.unit || "" } } },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: { callbacks: { title: (items) => (timed && items.length ? clock(items[0].parsed.x, 0) : undefined) } },
        },
      },
    });
    canvas.dataset.plotted = JSON.stringify({
      x: x.type, labels: chart.data.labels || [],
      ticks: timed ? chart.scales.x.ticks.map((t) => clock(t.value, span)) : [],
      datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })),
    });
  });
  // At most eight ticks on round times: every 5, 15 or 30 minutes, or every 1, 3 or 6 hours, as the span needs.
  function roundTicks(min, max) {
    const steps = [300e3, 900e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 24 * 3600e3];
    const step = steps.find((s) => (max - min) / s <= 8) || steps[steps.length - 1];
    const out = [];
    for (let t = Math.ceil(min / step) * step; t <= max; t += step) out.push({ value: t });
    return out;
  }
  // A time as a person reads it, in the browser's time zone. Over a long span the ticks fall on whole
  // hours (multiples of three hours), so a day reads 09:00, 12:00 ... and not minute by minute.
  function clock(ms, span) {
    const d = new Date(ms);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
  }
})();
