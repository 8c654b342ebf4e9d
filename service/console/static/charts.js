// One small picture per vendor, drawn as inline SVG from the public API: the runs of the last hours by
// outcome, and how long callbacks took from the run's completion (when hookbridge learned the vendor was
// done) to the receiver's 2xx.

import { collect } from "./api.js";
import { clear, duration, h, notice, svg } from "./dom.js";
import { vendors } from "./runs.js";

const HOURS = 6;
const BUCKETS = 12;
const OUTCOMES = ["succeeded", "failed", "canceled", "in flight"];
const TERMINAL_EVENTS = ["run.succeeded", "run.failed", "run.canceled"];
const BINS = [250, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, Infinity];
const BIN_LABELS = ["<¼s", "<½s", "<1s", "<2s", "<5s", "<10s", "<30s", "<1m", "<5m", "≥5m"];
const W = 360;
const H = 110;
const PAD = { left: 28, right: 6, top: 8, bottom: 18 };

const outcome = (run) => (["succeeded", "failed", "canceled"].includes(run.status) ? run.status : "in flight");

function quantile(sorted, p) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

/** Stacked bars: runs created in each slice of the window, split by outcome. */
function runsChart(runs, start, end) {
  const slice = (end - start) / BUCKETS;
  const counts = Array.from({ length: BUCKETS }, () => Object.fromEntries(OUTCOMES.map((o) => [o, 0])));
  for (const run of runs) {
    const i = Math.min(BUCKETS - 1, Math.floor((Date.parse(run.created_at) - start) / slice));
    if (i >= 0) counts[i][outcome(run)] += 1;
  }
  const top = Math.max(1, ...counts.map((c) => OUTCOMES.reduce((n, o) => n + c[o], 0)));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const barW = plotW / BUCKETS;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "runs by outcome" });
  chart.append(
    svg("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom, class: "axis" }),
    svg("text", { x: PAD.left - 4, y: PAD.top + 8, class: "label end" }, top),
    svg("text", { x: PAD.left - 4, y: H - PAD.bottom, class: "label end" }, 0),
    svg("text", { x: PAD.left, y: H - 4, class: "label" }, `-${HOURS} h`),
    svg("text", { x: W - PAD.right, y: H - 4, class: "label end" }, "now"),
  );
  counts.forEach((c, i) => {
    let y = H - PAD.bottom;
    for (const o of OUTCOMES) {
      if (!c[o]) continue;
      const height = (c[o] / top) * plotH;
      y -= height;
      chart.append(
        svg(
          "rect",
          { x: PAD.left + i * barW + 1, y, width: barW - 2, height, class: `seg ${o.replace(" ", "-")}` },
          svg("title", {}, `${c[o]} ${o}`),
        ),
      );
    }
  });
  return chart;
}

/** A histogram of completion-to-callback times, on bins that widen with the time. */
function latencyChart(latencies) {
  const counts = BINS.map(() => 0);
  for (const ms of latencies) counts[BINS.findIndex((edge) => ms < edge)] += 1;
  const top = Math.max(1, ...counts);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const barW = plotW / BINS.length;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "callback latency" });
  chart.append(
    svg("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom, class: "axis" }),
    svg("text", { x: PAD.left - 4, y: PAD.top + 8, class: "label end" }, top),
  );
  counts.forEach((n, i) => {
    const height = (n / top) * plotH;
    const label = BIN_LABELS[i];
    chart.append(
      svg(
        "rect",
        { x: PAD.left + i * barW + 1, y: H - PAD.bottom - height, width: barW - 2, height, class: "seg latency" },
        svg("title", {}, `${n} callbacks ${label}`),
      ),
      svg("text", { x: PAD.left + (i + 0.5) * barW, y: H - 4, class: "label middle" }, label),
    );
  });
  return chart;
}

function legend() {
  return h(
    "p",
    { class: "legend" },
    OUTCOMES.map((o) => h("span", { class: `key ${o.replace(" ", "-")}` }, o)),
  );
}

export function vendorsView(root) {
  const grid = h("div", { class: "vendors" });
  const message = h("p", { class: "notice", hidden: true });
  clear(root).append(
    h("h2", {}, `Vendors: the last ${HOURS} hours`),
    legend(),
    message,
    grid,
  );
  (async () => {
    try {
      const end = Date.now();
      const start = end - HOURS * 3600 * 1000;
      const since = new Date(start).toISOString();
      const runs = await collect("/v1/runs", { max: 2000, stop: (r) => r.created_at < since });
      const byId = new Map(runs.map((r) => [r.id, r]));
      const latency = new Map();
      for (const sub of await collect("/v1/subscriptions", { max: 200 })) {
        const rows = await collect(`/v1/subscriptions/${encodeURIComponent(sub.id)}/deliveries`, {
          max: 2000,
          stop: (d) => d.created_at < since,
        });
        for (const d of rows) {
          const run = byId.get(d.run_id);
          if (!run || !run.completed_at || d.status !== "succeeded" || !TERMINAL_EVENTS.includes(d.event_type)) continue;
          const ms = Math.max(0, Date.parse(d.updated_at) - Date.parse(run.completed_at));
          if (!latency.has(run.vendor)) latency.set(run.vendor, []);
          latency.get(run.vendor).push(ms);
        }
      }
      const names = [...new Set([...(await vendors()), ...runs.map((r) => r.vendor)])];
      for (const vendor of names) {
        const mine = runs.filter((r) => r.vendor === vendor);
        const times = (latency.get(vendor) || []).sort((a, b) => a - b);
        const tally = OUTCOMES.map((o) => `${mine.filter((r) => outcome(r) === o).length} ${o}`).join(" · ");
        grid.append(
          h(
            "section",
            { class: "vendor", "data-vendor": vendor },
            h("h3", {}, vendor),
            h("p", { class: "muted" }, `${mine.length} runs: ${tally}`),
            runsChart(mine, start, end),
            h(
              "p",
              { class: "muted" },
              times.length
                ? `completion → callback: median ${duration(quantile(times, 0.5))}, p95 ${duration(quantile(times, 0.95))} (${times.length} callbacks)`
                : "completion → callback: no callback yet",
            ),
            latencyChart(times),
          ),
        );
      }
      if (!names.length) grid.append(h("p", { class: "empty" }, "No runs in the window."));
    } catch (e) {
      notice(message, `Could not load the pictures: ${e.message}`, "error");
    }
  })();
  return () => {};
}
