// Runs: the list with filters and live status, and one run's timeline (submit, the vendor trail, events,
// every delivery with every attempt).

import { api, ApiError, collect, q } from "./api.js";
import { activatable, badge, clear, duration, excerpt, h, notice, when } from "./dom.js";
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
    {
      "data-run-id": run.id,
      class: "link",
      ...activatable(() => (location.hash = `#/runs/${encodeURIComponent(run.id)}`)),
    },
    h("td", { class: "mono" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, tabindex: -1 }, run.id)),
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
  const search = h("input", { id: "run-search", name: "run-id", type: "search", placeholder: "run_…", spellcheck: "false" });
  const searchForm = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (e) => {
        e.preventDefault();
        const id = search.value.trim();
        if (id) location.hash = `#/runs/${encodeURIComponent(id)}`;
      },
    },
    h("label", { for: "run-search" }, "Run id"),
    search,
    h("button", { type: "submit" }, "Open"),
  );
  let cursor = null;
  const more = h("button", { type: "button", class: "more", hidden: true, onclick: () => loadMore() }, "Load 50 more");
  clear(root).append(
    h("h2", {}, "Runs"),
    searchForm,
    bar,
    message,
    h(
      "div",
      { class: "scroll" },
      h(
      "table",
      { class: "runs" },
      h(
        "thead",
        {},
        h("tr", {}, ["run", "vendor", "operation", "status", "vendor status", "progress", "created", "updated"].map((c) => h("th", { scope: "col" }, c))),
      ),
      body,
    ),
    ),
    more,
  );
  vendors().then((names) => {
    bar.insertBefore(select("vendor", names, filters.vendor, setFilter("vendor")), mode);
    bar.insertBefore(select("status", STATUSES, filters.status, setFilter("status")), mode);
  });

  const rows = new Map();
  const matches = (run) =>
    (!filters.vendor || run.vendor === filters.vendor) && (!filters.status || run.status === filters.status);
  // The rows are drawn again as new elements (each load, each event of a run): give the focus back to
  // the run the keyboard was on, or a redraw would drop it while the user is on a row.
  const keepingFocus = (draw) => {
    const focused = document.activeElement?.dataset?.runId;
    draw();
    if (focused && document.activeElement?.dataset?.runId !== focused) rows.get(focused)?.focus();
  };
  const show = (list) =>
    keepingFocus(() => {
      rows.clear();
      clear(body);
      for (const run of list) {
        const row = runRow(run);
        rows.set(run.id, row);
        body.append(row);
      }
      if (!list.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No runs.")));
    });
  const update = (run) =>
    keepingFocus(() => {
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
    });
  const append = (list) => {
    for (const run of list) {
      if (rows.has(run.id)) continue;
      const row = runRow(run);
      rows.set(run.id, row);
      body.append(row);
    }
  };
  const page = (answer) => {
    cursor = answer.next_cursor || null;
    more.hidden = !cursor;
    return answer.data;
  };
  const loadMore = async () => {
    if (!cursor) return;
    more.disabled = true;
    try {
      append(page(await api(`/v1/runs${q({ ...filters, limit: 50, cursor })}`)));
    } catch (e) {
      notice(message, `Could not load more runs: ${e.message}`, "error");
    } finally {
      more.disabled = false;
    }
  };
  const load = async () => {
    try {
      show(page(await api(`/v1/runs${q({ ...filters, limit: 50 })}`)));
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

/** Every delivery of one run, with attempts: the run's own index (``GET /v1/runs/{id}/deliveries``);
 * an API without it (404 on that route) is read the old way, in each subscription's log. The
 * subscriptions are read once per page (``subs``), not on every refresh. */
async function runDeliveries(runId, since, subs) {
  const byId = new Map(subs.map((s) => [s.id, s.url]));
  let found;
  try {
    const rows = await collect(`/v1/runs/${encodeURIComponent(runId)}/deliveries`, { max: 500 });
    found = rows.map((d) => ({ ...d, url: byId.get(d.subscription_id) }));
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 404) throw err;
    found = [];
    for (const sub of subs) {
      const rows = await collect(`/v1/subscriptions/${encodeURIComponent(sub.id)}/deliveries`, {
        max: 500,
        stop: (d) => d.created_at < since, // newest first: older than the run, nothing more of it
      });
      for (const d of rows) if (d.run_id === runId) found.push({ ...d, url: sub.url });
    }
  }
  return Promise.all(
    found.map(async (d) => ({ ...d, ...(await api(`/v1/deliveries/${encodeURIComponent(d.id)}`)) })),
  );
}

function attemptsTable(delivery) {
  const log = delivery.attempt_log || [];
  if (!log.length) return h("p", { class: "muted" }, "No attempt yet.");
  return h(
    "div",
    { class: "scroll" },
    h(
    "table",
    { class: "attempts" },
    h("thead", {}, h("tr", {}, ["#", "at", "status", "duration", "response", "error"].map((c) => h("th", { scope: "col" }, c)))),
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
    ),
  );
}

/** What the API shows of the request sent and the answer received, where it gives them. */
function exchange(delivery) {
  const parts = [];
  const show = (label, value) => {
    if (value === null || value === undefined || value === "") return;
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    parts.push(h("details", { class: "exchange" }, h("summary", {}, label), h("pre", { class: "payload mono" }, text)));
  };
  show("request headers", delivery.request_headers);
  show("request body (payload)", delivery.payload ?? delivery.request_body ?? delivery.body);
  const last = (delivery.attempt_log || []).at(-1);
  if (last) {
    show("last response headers", last.response_headers);
    show("last response body", last.response_body);
  }
  return parts;
}

/** One delivery: its target, status, request and response, attempts, and Resend (the API decides). */
export function deliveryBlock(delivery, onRetried) {
  const message = h("p", { class: "notice", hidden: true });
  const retry =
    delivery.status !== "in_flight"
      ? h(
          "button",
          {
            class: "retry",
            onclick: async (e) => {
              e.stopPropagation();
              e.target.disabled = true;
              try {
                await api(`/v1/deliveries/${encodeURIComponent(delivery.id)}/retry`, { method: "POST" });
                notice(message, "Resend queued.", "ok");
                onRetried?.();
              } catch (err) {
                notice(message, `Resend refused: ${err.message}`, "error");
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
    exchange(delivery),
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

/** One run's story. Refreshed when its stream says something happened, never on a timer while it does;
 * once the stream has ended (after the run's last event) and a delivery is still pending, it is read again
 * at a backoff (3 s, 6 s, 12 s ... 60 s): deliveries have no stream of their own. */
export function runView(root, runId) {
  const head = h("div");
  const list = h("ol", { class: "timeline" });
  const message = h("p", { class: "notice", hidden: true });
  const mode = h("span", { class: "live", id: "live-mode" }, "loading…");
  clear(root).append(
    h("p", {}, h("a", { href: "#/runs" }, "← runs")),
    h("h2", {}, "Run ", h("span", { class: "mono" }, runId)),
    mode,
    message,
    head,
    h("h3", {}, "Timeline"),
    list,
  );
  let timer = null;
  let busy = false;
  let again = false;
  let ended = false;
  let backoff = 3000;
  let subs = null;
  let settled = false;
  let soon = null;
  // A stream replays the run's past events when it opens, and a vendor may send several at once: one
  // read for a burst, not one per event.
  const later = () => {
    clearTimeout(soon);
    soon = setTimeout(load, 300);
  };
  const load = async () => {
    if (busy) {
      again = true; // an event arrived during a read: read once more after it, not once per event
      return;
    }
    busy = true;
    clearTimeout(timer);
    timer = null;
    try {
      const id = encodeURIComponent(runId);
      subs = subs || (await collect("/v1/subscriptions", { max: 200 }));
      const [run, events] = await Promise.all([api(`/v1/runs/${id}`), api(`/v1/runs/${id}/events`)]);
      const deliveries = await runDeliveries(runId, run.created_at, subs);
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
      settled = TERMINAL.includes(run.status) && deliveries.every((d) => d.status !== "pending");
      if (!settled && ended) {
        timer = setTimeout(() => document.hidden || load(), backoff);
        backoff = Math.min(backoff * 2, 60000);
      }
    } catch (e) {
      notice(message, `Could not load the run: ${e.message}`, "error");
    } finally {
      busy = false;
      if (again) {
        again = false;
        load();
      }
    }
  };
  const restart = () => {
    backoff = 3000; // a resend starts a new series of attempts: look again soon
    ended = true;
    load();
  };
  load();
  const stream = follow(`/v1/runs/${encodeURIComponent(runId)}/stream`, {
    onOpen: () => (mode.textContent = "live: the run's event stream"),
    onEvent: later,
    onUnavailable: () => {
      mode.textContent = "live: reading again while deliveries are pending";
      ended = true;
      load();
    },
    onEnd: () => {
      mode.textContent = "the run has ended";
      ended = true;
      if (!settled) later();
      return true;
    },
  });
  return () => {
    stream.close();
    clearTimeout(timer);
    clearTimeout(soon);
  };
}
