// Subscriptions: their health (success rate, last failure, why disabled), the delivery log, and the
// actions an operator needs: send a test, retry a delivery, recover since a time, rotate the secret,
// re-enable.

import { api, ApiError, collect, q } from "./api.js";
import { activatable, badge, clear, h, notice, when } from "./dom.js";
import { deliveryBlock } from "./runs.js";
import { follow } from "./sse.js";

const POLL_MS = 2000;
const HEALTH_WINDOW = 200; // the newest deliveries the success rate is computed over
const LOG_ROWS = 50;

/** Success rate and last failure from a subscription's newest deliveries (the log is newest first). */
export function health(deliveries) {
  const done = deliveries.filter((d) => d.status === "succeeded" || d.status === "failed");
  const ok = done.filter((d) => d.status === "succeeded").length;
  const failed = (d) => d.status === "failed" || (d.last_status_code !== null && !(d.last_status_code >= 200 && d.last_status_code < 300));
  const last = deliveries.find(failed);
  return {
    rate: done.length ? ok / done.length : null,
    counted: done.length,
    lastFailure: last ? { at: last.updated_at, code: last.last_status_code, id: last.id } : null,
  };
}

function rateText(hl) {
  if (hl.rate === null) return "no finished delivery yet";
  return `${(hl.rate * 100).toFixed(hl.rate === 1 || hl.rate === 0 ? 0 : 1)}% of the last ${hl.counted}`;
}

function stateCell(sub) {
  return sub.disabled ? [badge("disabled"), " ", h("span", { class: "muted" }, sub.disabled_reason ?? "")] : badge("active");
}

export const EVENT_TYPES = ["run.submitted", "run.progress", "run.succeeded", "run.failed", "run.canceled"];

/** The create and edit form: URL, description, event types. ``onSave(body)`` makes the call. */
export function subscriptionForm(sub, onSave, message) {
  const types = new Set(sub?.event_types || ["run.succeeded", "run.failed", "run.canceled"]);
  const url = h("input", { id: "sub-url", name: "url", type: "url", required: true, value: sub?.url || "", placeholder: "https://example.com/hooks" });
  const description = h("input", { id: "sub-description", name: "description", value: sub?.description || "" });
  const boxes = EVENT_TYPES.map((t) => h("input", { type: "checkbox", name: "event_types", value: t, id: `type-${t}`, checked: types.has(t) }));
  return h(
    "form",
    {
      class: "sub-form",
      onsubmit: async (e) => {
        e.preventDefault();
        const body = {
          url: url.value.trim(),
          description: description.value.trim() || null,
          event_types: boxes.filter((b) => b.checked).map((b) => b.value),
        };
        try {
          notice(message, await onSave(body), "ok");
        } catch (err) {
          notice(message, `Not saved: ${err.message}`, "error");
        }
      },
    },
    h("label", { for: "sub-url" }, "Callback URL"),
    url,
    h("label", { for: "sub-description" }, "Description"),
    description,
    h("fieldset", {}, h("legend", {}, "Event types"), boxes.map((b) => h("label", {}, b, " ", b.value))),
    h("div", {}, h("button", { type: "submit" }, sub ? "Save" : "Create subscription")),
  );
}

export function subscriptionsView(root) {
  const body = h("tbody");
  const message = h("p", { class: "notice", hidden: true, id: "action-result" });
  const secretBox = h("div", { class: "secret", hidden: true });
  const form = subscriptionForm(
    null,
    async (req) => {
      const made = await api("/v1/subscriptions", { method: "POST", body: req });
      clear(secretBox).append(
        h("p", {}, "Signing secret of the new subscription. Copy it now: it is not shown again on this page."),
        h("code", { class: "mono" }, made.secret),
      );
      secretBox.hidden = false;
      load();
      return `Subscription ${made.id} created.`;
    },
    message,
  );
  const create = h("details", {}, h("summary", {}, "New subscription"), form);
  clear(root).append(
    h("h2", {}, "Subscriptions"),
    create,
    message,
    secretBox,
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { class: "subs" },
        h("thead", {}, h("tr", {}, ["subscription", "url", "events", "state", "success rate", "last failure"].map((c) => h("th", { scope: "col" }, c)))),
        body,
      ),
    ),
  );
  const load = () => {
    clear(body);
    read();
  };
  const read = () => {
  (async () => {
    try {
      const subs = await collect("/v1/subscriptions", { max: 200 });
      if (!subs.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "empty" }, "No subscriptions.")));
      for (const sub of subs) {
        const rate = h("td", {}, "…");
        const last = h("td", {}, "…");
        const href = `#/subscriptions/${encodeURIComponent(sub.id)}`;
        body.append(
          h(
            "tr",
            { "data-sub-id": sub.id, class: "link", ...activatable(() => (location.hash = href)) },
            h("td", { class: "mono" }, h("a", { href, tabindex: -1 }, sub.id)),
            h("td", { class: "mono" }, sub.url),
            h("td", {}, (sub.event_types || ["run.succeeded", "run.failed", "run.canceled"]).join(", ")),
            h("td", {}, stateCell(sub)),
            rate,
            last,
          ),
        );
        collect(`/v1/subscriptions/${encodeURIComponent(sub.id)}/deliveries`, { max: HEALTH_WINDOW })
          .then((rows) => {
            const hl = health(rows);
            rate.textContent = rateText(hl);
            last.textContent = hl.lastFailure ? `${when(hl.lastFailure.at)} (${hl.lastFailure.code ?? "no answer"})` : "–";
          })
          .catch((e) => (rate.textContent = `unknown: ${e.message}`));
      }
    } catch (e) {
      notice(message, `Could not load subscriptions: ${e.message}`, "error");
    }
  })();
  };
  read();
  return () => {};
}

function action(label, run, message) {
  return h(
    "button",
    {
      onclick: async (e) => {
        e.target.disabled = true;
        try {
          notice(message, await run(), "ok");
        } catch (err) {
          notice(message, `${label} refused: ${err.message}`, "error");
        } finally {
          e.target.disabled = false;
        }
      },
    },
    label,
  );
}

function dayAgoLocal() {
  const d = new Date(Date.now() - 24 * 3600 * 1000);
  d.setMinutes(d.getMinutes() - d.getTimezoneOffset()); // datetime-local reads local wall time
  return d.toISOString().slice(0, 16);
}

export function subscriptionView(root, subId) {
  const id = encodeURIComponent(subId);
  const head = h("div");
  const message = h("p", { class: "notice", hidden: true, id: "action-result" });
  const secretBox = h("div", { class: "secret", hidden: true });
  const since = h("input", { type: "datetime-local", name: "since", value: dayAgoLocal(), "aria-label": "since" });
  const statusFilter = h(
    "select",
    { name: "delivery-status", "aria-label": "delivery status", onchange: () => load() },
    h("option", { value: "" }, "any status"),
    ["pending", "succeeded", "failed"].map((s) => h("option", { value: s }, s)),
  );
  const log = h("tbody");
  const open = new Set(); // deliveries whose attempts are shown
  let sub = null;

  const exampleType = h(
    "select",
    { id: "example-type", name: "example-type" },
    EVENT_TYPES.map((t) => h("option", { value: t, selected: t === "run.failed" }, t)),
  );
  const actions = h(
    "div",
    { class: "actions" },
    action("Send test", async () => {
      const answer = await api(`/v1/subscriptions/${id}/test`, { method: "POST" });
      load();
      return `Test event ${answer.event_id} queued.`;
    }, message),
    h("label", { for: "example-type" }, "Example"),
    exampleType,
    action("Send example event", async () => {
      const answer = await sendExample(id, exampleType.value);
      load();
      return answer.fallback
        ? `This API sends subscription.test only: test event ${answer.event_id} queued.`
        : `Example ${exampleType.value} event ${answer.event_id} queued.`;
    }, message),
    action("Retry all failed shown", async () => {
      // Every failed delivery in the log, once each, through the same endpoint as a row's Retry.
      const failed = await collect(`/v1/subscriptions/${id}/deliveries${q({ status: "failed" })}`, { max: LOG_ROWS });
      let sent = 0;
      const refused = [];
      for (const d of failed) {
        try {
          await api(`/v1/deliveries/${encodeURIComponent(d.id)}/retry`, { method: "POST" });
          sent += 1;
        } catch (err) {
          refused.push(`${d.id}: ${err.message}`);
        }
      }
      load();
      return `${sent} failed deliveries sent again${refused.length ? `; refused: ${refused.join("; ")}` : ""}.`;
    }, message),
    h(
      "span",
      { class: "recover" },
      since,
      action("Recover since", async () => {
        const answer = await api(`/v1/subscriptions/${id}/recover`, {
          method: "POST",
          body: { since: new Date(since.value).toISOString() },
        });
        load();
        return `${answer.retried} failed deliveries sent again.`;
      }, message),
    ),
    action("Rotate secret", async () => {
      const answer = await api(`/v1/subscriptions/${id}/rotate-secret`, { method: "POST" });
      // Shown once, here only: the old secret keeps signing beside it for the overlap.
      clear(secretBox).append(
        h("p", {}, "New signing secret. Copy it now: it is not shown again on this page."),
        h("code", { class: "mono" }, answer.secret),
      );
      secretBox.hidden = false;
      return "Secret rotated; the old one keeps signing beside it during the overlap.";
    }, message),
  );
  const toggle = h("span");
  const editBox = h("details", {}, h("summary", {}, "Edit"));
  const remove = action("Delete", async () => {
    if (!window.confirm(`Delete subscription ${subId}? Its pending deliveries are dropped.`)) return "Not deleted.";
    await api(`/v1/subscriptions/${id}`, { method: "DELETE" });
    location.hash = "#/subscriptions";
    return "Deleted.";
  }, message);
  remove.classList.add("danger");

  clear(root).append(
    h("p", {}, h("a", { href: "#/subscriptions" }, "← subscriptions")),
    h("h2", {}, "Subscription ", h("span", { class: "mono" }, subId)),
    head,
    h("div", { class: "actions" }, actions, toggle, remove),
    editBox,
    message,
    secretBox,
    h("h3", {}, "Delivery log ", statusFilter),
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        { class: "log" },
        h("thead", {}, h("tr", {}, ["delivery", "event", "run", "status", "attempts", "last code", "next attempt", "updated"].map((c) => h("th", { scope: "col" }, c)))),
        log,
      ),
    ),
  );

  const showHead = (rows) => {
    const hl = health(rows);
    clear(head).append(
      h(
        "dl",
        { class: "facts" },
        [
          ["url", h("span", { class: "mono" }, sub.url)],
          ["description", sub.description ?? "–"],
          ["events", (sub.event_types || ["run.succeeded", "run.failed", "run.canceled"]).join(", ")],
          ["state", stateCell(sub)],
          ["success rate", rateText(hl)],
          ["last failure", hl.lastFailure ? `${when(hl.lastFailure.at)} (${hl.lastFailure.code ?? "no answer"})` : "–"],
          ["failures in a row", sub.consecutive_failures],
        ].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      ),
    );
    if (editBox.children.length === 1) {
      editBox.append(
        subscriptionForm(sub, async (body) => {
          sub = await api(`/v1/subscriptions/${id}`, { method: "PATCH", body });
          load();
          return "Saved.";
        }, message),
      );
    }
    const enable = sub.disabled;
    clear(toggle).append(
      action(enable ? "Re-enable" : "Disable", async () => {
        sub = await api(`/v1/subscriptions/${id}`, { method: "PATCH", body: { disabled: !enable } });
        load();
        return enable ? "Re-enabled." : "Disabled.";
      }, message),
    );
  };

  const logRow = async (d) => {
    const href = d.run_id ? `#/runs/${encodeURIComponent(d.run_id)}` : null;
    const row = h(
      "tr",
      {
        "data-delivery-id": d.id,
        class: "link",
        ...activatable(() => {
          if (open.has(d.id)) open.delete(d.id);
          else open.add(d.id);
          load();
        }),
      },
      h("td", { class: "mono" }, d.id),
      h("td", {}, d.event_type),
      h("td", { class: "mono" }, href ? h("a", { href, onclick: (e) => e.stopPropagation() }, d.run_id) : "–"),
      h("td", {}, badge(d.status)),
      h("td", {}, d.attempts),
      h("td", {}, d.last_status_code ?? "–"),
      h("td", {}, when(d.next_attempt_at)),
      h("td", {}, when(d.updated_at)),
    );
    if (!open.has(d.id)) return [row];
    const full = await api(`/v1/deliveries/${encodeURIComponent(d.id)}`);
    return [row, h("tr", { class: "expanded" }, h("td", { colspan: 8 }, deliveryBlock({ ...full, url: sub.url }, load)))];
  };

  let busy = false;
  let again = false;
  let pending = false;
  const load = async () => {
    if (busy) {
      // A read asked for during a read (a Retry's answer, an event) is read once more after it: dropped,
      // the log would show the state from before the Retry until something else asked.
      again = true;
      return;
    }
    busy = true;
    try {
      sub = await api(`/v1/subscriptions/${id}`);
      const all = await collect(`/v1/subscriptions/${id}/deliveries`, { max: HEALTH_WINDOW });
      const status = statusFilter.value;
      const rows = status
        ? await collect(`/v1/subscriptions/${id}/deliveries${q({ status })}`, { max: LOG_ROWS })
        : all.slice(0, LOG_ROWS);
      showHead(all);
      pending = all.some((d) => d.status === "pending");
      const built = await Promise.all(rows.map(logRow));
      const focused = document.activeElement?.dataset?.deliveryId;
      clear(log).append(...built.flat());
      // The rows are new elements: give the focus back to the one the keyboard was on.
      if (focused) log.querySelector(`tr[data-delivery-id="${CSS.escape(focused)}"]`)?.focus();
      if (!rows.length) log.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No deliveries.")));
    } catch (e) {
      notice(message, `Could not load the subscription: ${e.message}`, "error");
    } finally {
      busy = false;
      if (again) {
        again = false;
        load();
      }
    }
  };
  // Live from the client's event stream (a run's event may have made a delivery to this subscription):
  // one read per burst of events. Attempt outcomes are not events, so while a delivery is pending the
  // log is read again with a backoff (3 s, doubling to 60 s); without the stream, every 2 s as before.
  let timer = null;
  let soon = null;
  let backoff = 3000;
  const later = () => {
    clearTimeout(soon);
    soon = setTimeout(refresh, 300);
  };
  const refresh = async () => {
    clearTimeout(timer);
    await load();
    if (pending) {
      timer = setTimeout(() => (document.hidden ? later() : refresh()), backoff);
      backoff = Math.min(backoff * 2, 60000);
    } else {
      backoff = 3000;
    }
  };
  let polling = null;
  refresh();
  const stream = follow("/v1/events/stream", {
    onOpen: later, // what happened while the stream was down
    onEvent: () => {
      backoff = 3000;
      later();
    },
    onUnavailable: () => {
      polling = setInterval(() => document.hidden || load(), POLL_MS); // not while the tab is hidden
    },
  });
  return () => {
    stream.close();
    clearTimeout(timer);
    clearTimeout(soon);
    clearInterval(polling);
  };
}

/** An example event of the chosen type; an API that takes no body for the test endpoint (422) gets the
 * plain subscription.test instead, said so in the answer. */
export async function sendExample(id, eventType) {
  try {
    return await api(`/v1/subscriptions/${id}/test`, { method: "POST", body: { event_type: eventType } });
  } catch (err) {
    if (!(err instanceof ApiError) || (err.status !== 422 && err.status !== 415)) throw err;
    return { ...(await api(`/v1/subscriptions/${id}/test`, { method: "POST" })), fallback: true };
  }
}
