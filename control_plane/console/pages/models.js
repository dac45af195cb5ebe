// Models (operators): prices, versions, aliases with history, and each model's backends
// (state, tier, weight, adapters) with add, change and remove.
import { api, apiAll } from "../api.js";
import { Action, ErrorNote, Field, Loaded, Table, cleaned, fmt, html, useEffect, useLoad, useState, when } from "../ui.js";

const STATES = ["starting", "ready", "down", "draining"];
const TIERS = ["hot", "warm", "cold"];

function Prices({ model, reload }) {
  const [form, set] = useState({ price_in_per_1k: model.price_in_per_1k, price_out_per_1k: model.price_out_per_1k });
  const [error, setError] = useState(null);
  const save = async (e) => {
    e.preventDefault(); setError(null);
    try { await api(`/admin/v1/models/${model.name}`, { method: "PATCH", body: cleaned(form, Object.keys(form)) }); reload(); } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${save} aria-label="Prices">
    <${Field} label="USD per 1k prompt tokens" name="price_in_per_1k" type="number" form=${form} set=${set} />
    <${Field} label="USD per 1k completion tokens" name="price_out_per_1k" type="number" form=${form} set=${set} />
    <div class="field"><button type="submit">Save prices</button></div><${ErrorNote} error=${error} /></form>`;
}

// A one-row form: fields [{name, label, options?}], submit(body) then reset.
function QuickForm({ label, fields, submit, initial = {} }) {
  const blank = Object.fromEntries(fields.map((f) => [f.name, initial[f.name] ?? ""]));
  const [form, set] = useState(blank);
  const [error, setError] = useState(null);
  const onSubmit = async (e) => {
    e.preventDefault(); setError(null);
    try { await submit(cleaned(form)); set(blank); } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${onSubmit} aria-label=${label}>
    ${fields.map((f) => html`<${Field} label=${f.label} name=${f.name} form=${form} set=${set} options=${f.options} required=${f.required} />`)}
    <div class="field"><button type="submit">${label}</button></div><${ErrorNote} error=${error} /></form>`;
}

function AddBackend({ model, versions, reload }) {
  const blank = { url: "", served_model: "", engine: "openai", version: "", weight: "1", tier: "hot", state: "starting", gpu_type: "" };
  const [form, set] = useState(blank);
  const [error, setError] = useState(null);
  const add = async (e) => {
    e.preventDefault(); setError(null);
    try {
      await api("/admin/v1/backends", { method: "POST", body: { ...cleaned(form, ["weight"]), model } });
      set(blank); reload();
    } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${add} aria-label="Add backend">
    <${Field} label="Backend URL" name="url" form=${form} set=${set} required placeholder="http://10.0.0.5:8000/v1" />
    <${Field} label="Served model name" name="served_model" form=${form} set=${set} placeholder="as the engine names it" />
    <${Field} label="Engine" name="engine" form=${form} set=${set} options=${["openai", "builtin", "vllm", "sglang", "tgi", "llamacpp"]} />
    <${Field} label="Version" name="version" form=${form} set=${set} options=${[["", "none"], ...versions.map((v) => v.version)]} />
    <${Field} label="Weight" name="weight" type="number" form=${form} set=${set} />
    <${Field} label="Tier" name="tier" form=${form} set=${set} options=${TIERS} />
    <${Field} label="State" name="state" form=${form} set=${set} options=${STATES} />
    <${Field} label="GPU type" name="gpu_type" form=${form} set=${set} />
    <div class="field"><button type="submit">Add backend</button></div><${ErrorNote} error=${error} /></form>`;
}

// Live columns from /admin/v1/backend-status (this gateway's breaker and load view).
const live = (field, show = fmt) => (b) => (b.live ? show(b.live[field]) : "–");
export const LIVE = [
  { key: "breaker", render: live("breaker") }, { key: "inflight", label: "in flight", render: live("inflight") },
  { key: "running", render: live("running") }, { key: "waiting", render: live("waiting") },
  { key: "kv_usage", label: "KV use", render: live("kv_usage", (v) => `${Math.round(100 * v)}%`) },
];

function patchBackend(b, change, reload) {
  return api(`/admin/v1/backends/${b.id}`, { method: "PATCH", body: change }).then(reload);
}

function Select({ label, value, options, onChange }) {
  return html`<select aria-label=${label} value=${value} onChange=${(e) => onChange(e.target.value)}>
    ${options.map((o) => html`<option value=${o}>${o}</option>`)}</select>`;
}

function ModelDetail({ model, names, reload }) {
  const [state, again] = useLoad(async () => ({
    versions: await apiAll(`/admin/v1/models/${model.name}/versions`),
    aliases: await apiAll(`/admin/v1/models/${model.name}/aliases`),
    adapters: await apiAll(`/admin/v1/models/${model.name}/adapters`),
    backends: await apiAll("/admin/v1/backends", { model: model.name }),
    live: Object.fromEntries((await api("/admin/v1/backend-status")).data.map((b) => [b.id, b])),
  }), [model.name]);
  useEffect(() => { const t = setInterval(again, 5000); return () => clearInterval(t); }, [again]);
  const [history, setHistory] = useState(null);
  const refresh = () => { again(); reload(); };
  const backendCols = [
    { key: "id" }, { key: "model", render: (b) => names[b.model_id] || b.model_id }, { key: "version" },
    { key: "url" }, { key: "engine" },
    { key: "state", render: (b) => html`<${Select} label=${`State of backend ${b.id}`} value=${b.state} options=${STATES}
      onChange=${(v) => patchBackend(b, { state: v }, again)} />` },
    { key: "tier", render: (b) => html`<${Select} label=${`Tier of backend ${b.id}`} value=${b.tier} options=${TIERS}
      onChange=${(v) => patchBackend(b, { tier: v }, again)} />` },
    { key: "weight" }, { key: "gpu_type", label: "GPU" }, { key: "adapters" }, ...LIVE,
    { key: "actions", render: (b) => html`<${Action} label="Remove" kind="danger" confirm
      run=${() => api(`/admin/v1/backends/${b.id}`, { method: "DELETE" }).then(again)} />` },
  ];
  return html`<${Loaded} state=${state}>${({ versions, aliases, adapters, backends, live }) => html`
    <section class="card"><h2>Prices</h2><${Prices} model=${model} reload=${refresh} /></section>
    <section class="card"><h2>Versions</h2><${Table} label="Versions" rows=${versions}
      cols=${[{ key: "version" }, { key: "kind" }, { key: "status" }, { key: "engine" }, { key: "source_uri", label: "source" }, { key: "created_at", render: (v) => when(v.created_at) }]} />
      <${QuickForm} label="Add version" fields=${[{ name: "version", label: "Version", required: true }, { name: "source_uri", label: "Source URI" }]}
        submit=${(b) => api(`/admin/v1/models/${model.name}/versions`, { method: "POST", body: b }).then(again)} /></section>
    <section class="card"><h2>Aliases</h2><${Table} label="Aliases" rows=${aliases}
      cols=${[{ key: "name", label: "alias" }, { key: "version" }, { key: "history", render: (a) => html`<button type="button"
        onClick=${async () => setHistory({ alias: a.name, rows: (await api(`/admin/v1/models/${model.name}/aliases/${a.name}/history`)).data })}>History</button>` }]} />
      ${history ? html`<h3>History of ${history.alias}</h3><${Table} label="Alias history" rows=${history.rows}
        cols=${[{ key: "at", render: (h) => when(h.at) }, { key: "old_version", label: "from" }, { key: "new_version", label: "to" }, { key: "actor" }]} />` : null}
      ${versions.length ? html`<${QuickForm} label="Point alias" initial=${{ alias: "default" }}
        fields=${[{ name: "alias", label: "Alias", required: true }, { name: "version", label: "Alias version", options: versions.map((v) => v.version) }]}
        submit=${(b) => api(`/admin/v1/models/${model.name}/aliases/${b.alias}`, { method: "PUT", body: { version: b.version || versions[0].version } }).then(again)} />` : null}</section>
    <section class="card"><h2>Adapters</h2><${Table} label="Adapters" rows=${adapters} empty="No LoRA adapters."
      cols=${[{ key: "name" }, { key: "base_version", label: "base version" }, { key: "rank" }, { key: "source_uri", label: "source" }]} /></section>
    <section class="card"><h2>Backends</h2><${Table} label="Backends" cols=${backendCols} rows=${backends.map((b) => ({ ...b, live: live[String(b.id)] }))} />
      <h3>Add a backend</h3><${AddBackend} model=${model.name} versions=${versions} reload=${again} /></section>`}<//>`;
}

export function Models() {
  const [state, reload] = useLoad(() => apiAll("/admin/v1/models"));
  const [open, setOpen] = useState(null);
  const cols = [
    { key: "name", render: (m) => html`<button type="button" class="link" aria-expanded=${open === m.name}
      onClick=${() => setOpen(open === m.name ? null : m.name)}>${m.name}</button>` },
    { key: "tier" }, { key: "context_length", label: "context" },
    { key: "routing", render: (m) => (m.routing ? fmt(m.routing.strategy || m.routing) : "default") },
    { key: "fallbacks" }, { key: "price_in_per_1k", label: "$ in / 1k" }, { key: "price_out_per_1k", label: "$ out / 1k" },
  ];
  return html`<${Loaded} state=${state}>${(models) => {
    const names = Object.fromEntries(models.map((m) => [m.id, m.name]));
    const chosen = models.find((m) => m.name === open);
    return html`<${Table} label="Models" cols=${cols} rows=${models} />
      <${QuickForm} label="New model" fields=${[{ name: "name", label: "Model name", required: true }]}
        submit=${async (b) => { await api("/admin/v1/models", { method: "POST", body: b }); reload(); setOpen(b.name); }} />
      ${chosen ? html`<h2>${chosen.name}</h2><${ModelDetail} model=${chosen} names=${names} reload=${reload} />` : html`<p class="muted">Choose a model to see its versions, aliases and backends.</p>`}`;
  }}<//>`;
}
