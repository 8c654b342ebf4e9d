// Server-sent events read with fetch(): EventSource cannot send an Authorization header, and the key
// must not travel in a URL. The parser follows the HTML standard's event-stream rules (fields id, event,
// data; comment lines for heartbeats; CR, LF or CRLF line ends).

import { authHeaders } from "./api.js";

/** Yields {id, type, data} for each event of a text/event-stream body. */
export async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { id: null, type: "message", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (;;) {
      const end = buffer.search(/\r\n|\r|\n/);
      // A CR at the very end may be the first half of a CRLF split across chunks: wait for more.
      if (end < 0 || (buffer[end] === "\r" && end === buffer.length - 1)) break;
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (event.data.length) yield { id: event.id, type: event.type, data: event.data.join("\n") };
        event = { id: event.id, type: "message", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue; // a heartbeat
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? "" : line.slice(colon + 1);
      if (text.startsWith(" ")) text = text.slice(1);
      if (field === "data") event.data.push(text);
      else if (field === "event") event.type = text;
      else if (field === "id" && !text.includes("\0")) event.id = text;
    }
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * Follows a stream, resuming with Last-Event-ID after a drop. ``onEvent`` gets each event's envelope
 * ({type, timestamp, data}); ``onUnavailable(status)`` is called once if the server has no such stream
 * (an older API, or too many streams open): the caller then polls instead. ``onEnd`` is called when the
 * server closes the stream; returning true stops following (a run's stream ends after its last event).
 */
export function follow(path, { onEvent, onUnavailable, onOpen, onEnd }) {
  const control = new AbortController();
  const { signal } = control;
  let lastId = null;
  (async () => {
    let backoff = 1000;
    while (!signal.aborted) {
      let response;
      try {
        const headers = authHeaders({ Accept: "text/event-stream" });
        if (lastId) headers["Last-Event-ID"] = lastId;
        response = await fetch(path, { headers, signal, cache: "no-store", credentials: "omit" });
      } catch {
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 15000);
        continue;
      }
      const type = response.headers.get("content-type") || "";
      if (!response.ok || !type.startsWith("text/event-stream")) {
        if (response.status === 401) window.dispatchEvent(new Event("hb:unauthorized"));
        response.body?.cancel().catch(() => {});
        if (!signal.aborted) onUnavailable?.(response.status);
        return;
      }
      onOpen?.();
      try {
        for await (const event of events(response.body)) {
          if (event.id) lastId = event.id;
          backoff = 1000;
          let envelope;
          try {
            envelope = JSON.parse(event.data);
          } catch {
            continue; // not ours to show
          }
          onEvent(envelope, event);
        }
      } catch {
        // A dropped connection: resume below.
      }
      if (signal.aborted || onEnd?.()) return;
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, 15000);
    }
  })();
  return { close: () => control.abort() };
}
