// Requests (operators): the most recent requests' metadata, filterable, refreshed on demand;
// admins open a request's stored bodies (kept where its guardrail policy logs bodies).
import { api } from "../api.js";
import { Field, Loaded, Table, fmt, html, useLoad, useState, when } from "../ui.js";
import { Bodies } from "./request_bodies.js";

const COLS = [
  { key: "created_at", label: "time", render: (r) => when(r.created_at) }, { key: "model" }, { key: "version" },
  { key: "status", render: (r) => `${r.status} (${r.http_status})` },
  { key: "latency_ms", label: "latency ms", render: (r) => fmt(Math.round(r.latency_ms)) },
  { key: "ttft_ms", label: "TTFT ms", render: (r) => (r.ttft_ms === null ? "" : fmt(Math.round(r.ttft_ms))) },
  { key: "tokens", render: (r) => `${r.prompt_tokens} + ${r.completion_tokens}` },
  { key: "cost", render: (r) => `$${r.cost.toFixed(6)}` }, { key: "backend" }, { key: "key_id", label: "key" },
  { key: "team" }, { key: "stream", render: (r) => (r.stream ? "stream" : "") },
  { key: "cache", render: (r) => r.cache || "" },
  { key: "trace_id", label: "trace", render: (r) => html`<code>${r.trace_id || r.request_id}</code>` },
];

export function Requests({ me }) {
  const [open, setOpen] = useState(null);
  const cols = me && me.role === "admin" ? [...COLS, { key: "bodies", render: (r) => html`<button type="button"
    onClick=${() => setOpen(r.request_id)} aria-label=${`Bodies of request ${r.request_id}`}>Bodies</button>` }] : COLS;
  const [form, set] = useState({ model: "", status: "", key_id: "" });
  const [query, setQuery] = useState(form);
  const [state, reload] = useLoad(() => api("/admin/v1/requests", { query: { ...query, limit: 200 } }), [JSON.stringify(query)]);
  return html`<form class="grid" aria-label="Filter requests" onSubmit=${(e) => { e.preventDefault(); setQuery(form); }}>
      <${Field} label="Model" name="model" form=${form} set=${set} />
      <${Field} label="Status" name="status" form=${form} set=${set} options=${[["", "any"], "ok", "error", "aborted"]} />
      <${Field} label="Key id" name="key_id" type="number" form=${form} set=${set} />
      <div class="field"><button type="submit">Filter</button></div>
      <div class="field"><button type="button" onClick=${reload}>Refresh</button></div></form>
    ${open ? html`<${Bodies} requestId=${open} onClose=${() => setOpen(null)} />` : null}
    <${Loaded} state=${state}>${(page) => html`<${Table} label="Recent requests" cols=${cols} rows=${page.data} empty="No requests yet." />`}<//>`;
}
