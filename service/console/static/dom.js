// Elements built from data without ever parsing data as HTML: text always goes in as text nodes, and
// attributes through setAttribute, so a tenant's URL, metadata or receiver's answer stays inert text.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h("td", {class: "status"}, run.status). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, for the charts. */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const today = new Date().toDateString() === d.toDateString();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  const day = today ? time : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
  return `${day} ${zone(d)}`;
}

/** The browser's zone at that instant, as the reader knows it (CET, GMT+2, UTC): times are never bare. */
export function zone(d = new Date()) {
  const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
    .formatToParts(d)
    .find((p) => p.type === "timeZoneName");
  return part ? part.value : "UTC";
}

/** A table row that opens like a link or a button, for the keyboard too: focusable, Enter and Space. */
export function activatable(action) {
  return {
    tabindex: 0,
    onclick: action,
    onkeydown: (e) => {
      if (e.target !== e.currentTarget || (e.key !== "Enter" && e.key !== " ")) return;
      e.preventDefault(); // Space would scroll the page
      action(e);
    },
  };
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

/** A status as a badge whose colour comes from the stylesheet (class names are ours, not data). */
export function badge(status) {
  const known = ["queued", "submitted", "running", "succeeded", "failed", "canceled", "pending", "active", "disabled"];
  return h("span", { class: `badge ${known.includes(status) ? status : "other"}` }, status ?? "–");
}

/** A message line that replaces itself: an action's outcome or an error. */
export function notice(el, text, kind = "info") {
  el.className = `notice ${kind}`;
  el.textContent = text;
  el.hidden = !text;
}

export function excerpt(text, max = 300) {
  if (text === null || text === undefined) return "";
  const s = typeof text === "string" ? text : JSON.stringify(text);
  return s.length > max ? `${s.slice(0, max)}…` : s;
}
