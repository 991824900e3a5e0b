// Ferry tracker pages: refresh the live region in place every data-refresh seconds (no reload),
// and draw the overview's two charts with uPlot from /charts. Local files only (no CDN).
(function () {
  "use strict";
  var body = document.body;
  var every = parseFloat(body.getAttribute("data-refresh") || "0");
  var live = document.getElementById("live");
  var stamp = document.getElementById("updated");
  var COLORS = { extract: "#6b7280", transform: "#2563eb", transfer: "#d97706", load: "#059669" };

  function partialUrl() {
    var u = new URL(window.location.href);
    u.searchParams.set("partial", "1");
    return u.toString();
  }

  function refresh() {
    fetch(partialUrl(), { headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        if (html !== live.innerHTML) { live.innerHTML = html; }
        stamp.textContent = "updated " + new Date().toLocaleTimeString();
        stamp.className = "";
      })
      .catch(function (e) { stamp.textContent = "refresh failed (" + e + ")"; stamp.className = "bad"; });
  }

  var charts = document.querySelector("section.charts");
  var plots = {};
  function width(el) { return Math.max(320, el.clientWidth || 480); }

  function draw(id, opts, data) {
    var el = document.getElementById(id);
    if (!el || typeof uPlot === "undefined") { return; }
    if (plots[id]) { plots[id].setData(data); return; }
    opts.width = width(el);
    opts.height = 220;
    plots[id] = new uPlot(opts, data, el);
  }

  function drawCharts() {
    var ds = charts.getAttribute("data-dataset");
    fetch("/charts" + (ds ? "?dataset=" + encodeURIComponent(ds) : ""))
      .then(function (r) { return r.json(); })
      .then(function (c) {
        var stages = Object.keys(c.files_per_min);
        draw("chart-rate", {
          series: [{}].concat(stages.map(function (s) {
            return { label: s, stroke: COLORS[s] || "#333", width: 2 };
          })),
          axes: [{}, { label: "files/min" }],
        }, [c.t].concat(stages.map(function (s) { return c.files_per_min[s]; })));
        draw("chart-latency", {
          series: [{}, { label: "p50", stroke: "#2563eb", width: 2, spanGaps: true },
                   { label: "p95", stroke: "#dc2626", width: 2, spanGaps: true }],
          axes: [{}, { label: "seconds" }],
        }, [c.latency.t, c.latency.p50, c.latency.p95]);
        charts.setAttribute("data-drawn", "1");
      });
  }

  if (charts) { drawCharts(); }
  if (every > 0) {
    setInterval(function () {
      if (document.hidden) { return; }
      refresh();
      if (charts) { drawCharts(); }
    }, every * 1000);
  }
})();
