// The admin and OpenAI APIs, called with the signed-in key. The key lives in this tab's
// sessionStorage only: never in the page, a cookie or localStorage.
const STORE = "inferplane-key";

export const session = {
  key: () => sessionStorage.getItem(STORE),
  signIn: (key) => sessionStorage.setItem(STORE, key),
  signOut: () => sessionStorage.removeItem(STORE),
};

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = session.key();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// api("/admin/v1/keys") → parsed JSON; api(path, {method: "POST", body}) sends JSON.
export async function api(path, { method = "GET", body, query } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const resp = await fetch(url, init);
  if (resp.status === 204) return null;
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new ApiError(resp.status, (data.error && data.error.message) || `HTTP ${resp.status}`);
  return data;
}

// Every page of a list endpoint ({data, has_more}) up to `max` rows.
export async function apiAll(path, query = {}, max = 2000) {
  const rows = [];
  for (let offset = 0; rows.length < max; offset += 500) {
    const page = await api(path, { query: { ...query, limit: 500, offset } });
    rows.push(...page.data);
    if (!page.has_more) break;
  }
  return rows;
}

// A streamed chat completion: onDelta(text) per chunk; resolves to the final usage (or null).
export async function streamChat(body, onDelta, signal) {
  const resp = await fetch("/v1/chat/completions", {
    method: "POST", signal,
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!resp.ok) {
    const data = await resp.json().catch(() => ({}));
    throw new ApiError(resp.status, (data.error && data.error.message) || `HTTP ${resp.status}`);
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "", usage = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    const events = buffer.split("\n\n");
    buffer = events.pop();
    for (const event of events) {
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("");
      if (!data || data === "[DONE]") continue;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(502, chunk.error.message || "stream error");
      if (chunk.usage) usage = chunk.usage;
      const text = chunk.choices && chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content;
      if (text) onDelta(text);
    }
  }
  return usage;
}
