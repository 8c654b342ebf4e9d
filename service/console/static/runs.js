// Runs: the list with filters and live status, and one run's timeline (submit, the vendor trail, events,
// every delivery with every attempt).

import { api, collect, q } from "./api.js";
import { badge, clear, duration, excerpt, h, notice, when } from "./dom.js";
import { follow } from "./sse.js";

export const STATUSES = ["queued", "submitted", "running", "succeeded", "failed", "canceled"];
const TERMINAL = ["succeeded", "failed", "canceled"];
const POLL_MS = 2000;

let vendorNames = null;

/** The vendors this API serves, read from its own OpenAPI document (the vendor filter's enum). */
export async function vendors() {
  if (vendorNames) return vendorNames;
  try {
    const doc = await (await fetch("/openapi.json", { credentials: "omit" })).json();
    const resolve = (p) => (p.$ref ? p.$ref.split("/").slice(1).reduce((node, k) => node[k], doc) : p);
    const params = (doc.paths["/v1/runs"].get.parameters || []).map(resolve);
    const vendor = params.find((p) => p.name === "vendor");
    const schema = vendor && vendor.schema && resolve(vendor.schema);
    vendorNames = (schema && schema.enum) || [];
  } catch {
    vendorNames = [];
  }
  return vendorNames;
}

function select(name, options, value, onchange) {
  return h(
    "select",
    { name, "aria-label": name, onchange },
    h("option", { value: "" }, `any ${name}`),
    options.map((o) => h("option", { value: o, selected: o === value }, o)),
  );
}

function progressText(run) {
  const p = run.progress;
  if (!p) return "";
  const parts = [p.percent !== null && p.percent !== undefined ? `${p.percent}%` : "", p.phase || ""];
  return parts.filter(Boolean).join(" ");
}

function runRow(run) {
  return h(
    "tr",
    { "data-run-id": run.id, class: "link", onclick: () => (location.hash = `#/runs/${encodeURIComponent(run.id)}`) },
    h("td", { class: "mono" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}` }, run.id)),
    h("td", {}, run.vendor),
    h("td", {}, run.operation),
    h("td", { class: "status" }, badge(run.status)),
    h("td", {}, run.vendor_status ?? ""),
    h("td", {}, progressText(run)),
    h("td", {}, when(run.created_at)),
    h("td", {}, when(run.updated_at)),
  );
}

/** The list. Live from /v1/events/stream where the API has it, else the list again every 2 s. */
export function runsView(root, params) {
  const filters = { vendor: params.get("vendor") || "", status: params.get("status") || "" };
  const body = h("tbody");
  const mode = h("span", { class: "live", id: "live-mode" }, "loading…");
  const message = h("p", { class: "notice", hidden: true });
  const setFilter = (name) => (e) => {
    filters[name] = e.target.value;
    location.hash = `#/runs${q(filters)}`;
  };
  const bar = h("div", { class: "filters" }, h("span", {}, "Filter:"), mode);
  clear(root).append(
    h("h2", {}, "Runs"),
    bar,
    message,
    h(
      "table",
      { class: "runs" },
      h(
        "thead",
        {},
        h("tr", {}, ["run", "vendor", "operation", "status", "vendor status", "progress", "created", "updated"].map((c) => h("th", {}, c))),
      ),
      body,
    ),
  );
  vendors().then((names) => {
    bar.insertBefore(select("vendor", names, filters.vendor, setFilter("vendor")), mode);
    bar.insertBefore(select("status", STATUSES, filters.status, setFilter("status")), mode);
  });

  const rows = new Map();
  const matches = (run) =>
    (!filters.vendor || run.vendor === filters.vendor) && (!filters.status || run.status === filters.status);
  const show = (list) => {
    rows.clear();
    clear(body);
    for (const run of list) {
      const row = runRow(run);
      rows.set(run.id, row);
      body.append(row);
    }
    if (!list.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No runs.")));
  };
  const update = (run) => {
    const old = rows.get(run.id);
    if (!matches(run)) {
      old?.remove();
      rows.delete(run.id);
      return;
    }
    const row = runRow(run);
    if (old) old.replaceWith(row);
    else body.prepend(row);
    body.querySelector("td.empty")?.parentElement.remove();
    rows.set(run.id, row);
  };
  const load = async () => {
    try {
      show((await api(`/v1/runs${q({ ...filters, limit: 50 })}`)).data);
      notice(message, "");
    } catch (e) {
      notice(message, `Could not load runs: ${e.message}`, "error");
    }
  };

  let timer = null;
  const poll = () => {
    mode.textContent = "live: polling every 2 s";
    timer = setInterval(() => document.hidden || load(), POLL_MS);
  };
  let loaded = load();
  const stream = follow("/v1/events/stream", {
    onOpen: () => {
      mode.textContent = "live: event stream";
      loaded = load(); // what happened while the stream was down
    },
    onEvent: (envelope) => {
      const run = envelope.data && envelope.data.run;
      // After the list that was read when the stream opened, so that it never overwrites a newer event.
      if (run && run.id) loaded.then(() => update(run));
    },
    onUnavailable: poll,
  });
  return () => {
    stream.close();
    clearInterval(timer);
  };
}

// The timeline ---------------------------------------------------------------------------------------

/** Every delivery of one run, found in each subscription's log (the newest 500 of each), with attempts. */
async function runDeliveries(runId, since) {
  const subs = await collect("/v1/subscriptions", { max: 200 });
  const found = [];
  for (const sub of subs) {
    const rows = await collect(`/v1/subscriptions/${encodeURIComponent(sub.id)}/deliveries`, {
      max: 500,
      stop: (d) => d.created_at < since, // newest first: older than the run, nothing more of it
    });
    for (const d of rows) if (d.run_id === runId) found.push({ ...d, url: sub.url });
  }
  return Promise.all(
    found.map(async (d) => ({ ...d, ...(await api(`/v1/deliveries/${encodeURIComponent(d.id)}`)) })),
  );
}

function attemptsTable(delivery) {
  const log = delivery.attempt_log || [];
  if (!log.length) return h("p", { class: "muted" }, "No attempt yet.");
  return h(
    "table",
    { class: "attempts" },
    h("thead", {}, h("tr", {}, ["#", "at", "status", "duration", "response", "error"].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      log.map((a, i) =>
        h(
          "tr",
          { class: a.status_code >= 200 && a.status_code < 300 ? "ok" : "bad" },
          h("td", {}, i + 1),
          h("td", {}, when(a.at)),
          h("td", { class: "code" }, a.status_code ?? "–"),
          h("td", {}, duration(a.duration_ms)),
          h("td", { class: "mono excerpt" }, excerpt(a.response_body, 200)),
          h("td", { class: "error" }, a.error ?? ""),
        ),
      ),
    ),
  );
}

/** One delivery: its target, status and attempts, and a retry button once it has failed. */
export function deliveryBlock(delivery, onRetried) {
  const message = h("p", { class: "notice", hidden: true });
  const retry =
    delivery.status === "failed"
      ? h(
          "button",
          {
            class: "retry",
            onclick: async (e) => {
              e.stopPropagation();
              e.target.disabled = true;
              try {
                await api(`/v1/deliveries/${encodeURIComponent(delivery.id)}/retry`, { method: "POST" });
                notice(message, "Retry queued.", "ok");
                onRetried?.();
              } catch (err) {
                notice(message, `Retry refused: ${err.message}`, "error");
                e.target.disabled = false;
              }
            },
          },
          "Retry",
        )
      : null;
  return h(
    "div",
    { class: "delivery", "data-delivery-id": delivery.id },
    h(
      "div",
      { class: "head" },
      badge(delivery.status),
      h("span", { class: "mono" }, delivery.id),
      h("span", {}, `${delivery.event_type} → `),
      h("span", { class: "mono" }, delivery.url || delivery.subscription_id),
      h("span", { class: "muted" }, `${delivery.attempts} attempt(s)`),
      retry,
    ),
    message,
    attemptsTable(delivery),
  );
}

function trailItems(run) {
  const items = (run.trail || []).map((t) => ({
    at: t.at,
    kind: t.kind,
    title: t.kind.replace("_", " "),
    detail: [
      t.vendor_status ? `vendor: ${t.vendor_status}` : "",
      t.latency_ms !== null && t.latency_ms !== undefined ? `${Math.round(t.latency_ms)} ms` : "",
      t.detail ? excerpt(t.detail, 200) : "",
    ]
      .filter(Boolean)
      .join(" · "),
  }));
  // The API keeps the first steps and the latest ones; those in between are only counted.
  if (run.trail_dropped > 0 && items.length > 2) {
    const gap = { at: items[2].at, kind: "gap", title: `… ${run.trail_dropped} more vendor steps`, detail: "not kept" };
    items.splice(2, 0, gap);
  }
  return items;
}

function timelineItems(run, events, deliveries) {
  const items = [{ at: run.created_at, kind: "accepted", title: "accepted", detail: `${run.vendor} ${run.operation}` }];
  items.push(...trailItems(run));
  for (const event of events) {
    const r = event.data && event.data.run;
    const detail =
      event.type === "run.progress" && r ? progressText(r) : r && r.error ? `${r.error.code}: ${r.error.message}` : "";
    const mine = deliveries.filter((d) => d.event_id === event.id);
    items.push({ at: event.created_at, kind: "event", title: event.type, detail, deliveries: mine });
  }
  if (run.completed_at) {
    items.push({ at: run.completed_at, kind: "completed", status: run.status, title: `ended ${run.status}`, detail: "" });
  }
  return items.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
}

function runSummary(run) {
  const facts = [
    ["status", badge(run.status)],
    ["vendor", `${run.vendor} (${run.operation})`],
    ["vendor run", run.vendor_run_id ?? "–"],
    ["vendor status", run.vendor_status ?? "–"],
    ["polls", run.polls ?? 0],
    ["rate limited", run.rate_limited ?? "–"],
    ["created", when(run.created_at)],
    ["completed", when(run.completed_at)],
    ["error", run.error ? `${run.error.code}: ${run.error.message}` : "–"],
    ["metadata", Object.keys(run.metadata || {}).length ? JSON.stringify(run.metadata) : "–"],
  ];
  return h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

/** One run's story. Refreshed on each of its events (stream) or every 2 s, until nothing is pending. */
export function runView(root, runId) {
  const head = h("div");
  const list = h("ol", { class: "timeline" });
  const message = h("p", { class: "notice", hidden: true });
  clear(root).append(
    h("p", {}, h("a", { href: "#/runs" }, "← runs")),
    h("h2", {}, "Run ", h("span", { class: "mono" }, runId)),
    message,
    head,
    h("h3", {}, "Timeline"),
    list,
  );
  let timer = null;
  let busy = false;
  const load = async () => {
    if (busy) return;
    busy = true;
    try {
      const id = encodeURIComponent(runId);
      const [run, events] = await Promise.all([api(`/v1/runs/${id}`), api(`/v1/runs/${id}/events`)]);
      const deliveries = await runDeliveries(runId, run.created_at);
      clear(head).append(runSummary(run));
      clear(list).append(
        ...timelineItems(run, events.data, deliveries).map((item) =>
          h(
            "li",
            { class: `item ${item.kind} ${item.status || ""}`, "data-kind": item.kind },
            h("span", { class: "at" }, when(item.at)),
            h("span", { class: "what" }, item.title),
            h("span", { class: "detail" }, item.detail),
            (item.deliveries || []).map((d) => deliveryBlock(d, restart)),
          ),
        ),
      );
      notice(message, "");
      const settled = TERMINAL.includes(run.status) && deliveries.every((d) => d.status !== "pending");
      if (settled) {
        clearInterval(timer);
        timer = null;
      }
    } catch (e) {
      notice(message, `Could not load the run: ${e.message}`, "error");
    } finally {
      busy = false;
    }
  };
  const restart = () => {
    load();
    if (!timer) timer = setInterval(() => document.hidden || load(), POLL_MS);
  };
  restart();
  // Its events arrive at once from the run's stream; the deliveries that follow are polled above.
  const stream = follow(`/v1/runs/${encodeURIComponent(runId)}/stream`, {
    onEvent: load,
    onUnavailable: () => {},
    onEnd: () => true,
  });
  return () => {
    stream.close();
    clearInterval(timer);
  };
}
