// The public /v1 API, called exactly as a curl would: the client's key as a Bearer token on every call.
// The key lives in sessionStorage only (gone when the tab closes or on sign-out): never in a URL, a
// cookie or localStorage.

const KEY = "hookbridge.apiKey";

export const session = {
  get key() {
    return sessionStorage.getItem(KEY);
  },
  signIn(key) {
    sessionStorage.setItem(KEY, key);
  },
  signOut() {
    sessionStorage.removeItem(KEY);
  },
};

/** An answer other than 2xx, with the RFC 9457 problem the API sent (its code, title and detail). */
export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${session.key ?? ""}`, ...extra };
}

/** One call; the JSON answer, or null for 204. A 401 signs out (the key was revoked or mistyped). */
export async function api(path, { method = "GET", body, key } = {}) {
  const headers = key === undefined ? authHeaders() : { Authorization: `Bearer ${key}` };
  headers.Accept = "application/json";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && key === undefined) window.dispatchEvent(new Event("hb:unauthorized"));
    throw new ApiError(response.status, data);
  }
  return data;
}

/** A list endpoint followed through its cursors until ``max`` rows, or until ``stop(row)`` is true. */
export async function collect(path, { max = 200, stop } = {}) {
  const rows = [];
  let cursor = null;
  const sep = path.includes("?") ? "&" : "?";
  do {
    const limit = Math.min(200, max - rows.length);
    const page = await api(`${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    for (const row of page.data) {
      if (stop && stop(row)) return rows;
      rows.push(row);
    }
    cursor = page.next_cursor;
  } while (cursor && rows.length < max);
  return rows;
}

export function q(params) {
  const pairs = Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined);
  return pairs.length ? `?${new URLSearchParams(pairs)}` : "";
}
