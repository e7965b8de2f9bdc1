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
    const chart = new Chart(canvas, {
      type: spec.type,
      data: {
        labels: spec.labels,
        datasets: spec.datasets.map((d, i) => ({
          label: d.label, data: d.data, borderColor: COLORS[i % COLORS.length],
          backgroundColor: COLORS[i % COLORS.length] + (spec.type === "bar" ? "cc" : "33"),
          pointRadius: 0, borderWidth: 2, tension: 0.2,
        })),
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: "index", intersect: false },
        scales: { y: { beginAtZero: true, title: { display: !!spec.unit, text: spec.unit || "" } } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
      },
    });
    canvas.dataset.plotted = JSON.stringify({
      labels: chart.data.labels, datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })),
    });
  });
})();
