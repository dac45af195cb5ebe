// API keys (admins): create (secret shown once), edit limits, rotate, revoke; spend vs budget.
import { api, apiAll } from "../api.js";
import { Action, ErrorNote, Field, Loaded, SecretOnce, Table, cleaned, fmt, html, useLoad, useState } from "../ui.js";

const ROLES = ["user", "operator", "admin"];
const PRIORITIES = ["standard", "high", "batch"];
const PERIODS = [["", "lifetime"], "hour", "day", "week", "month"];
const NUMERIC = ["rpm_limit", "tpm_limit", "max_budget"];
const BLANK = { name: "", role: "user", team: "", models: "", rpm_limit: "", tpm_limit: "",
  max_budget: "", budget_period: "", priority: "standard" };

export function Spend({ spend, budget }) {
  if (budget === null || budget === undefined) return html`<span>$${fmt(spend || 0)}</span>`;
  return html`<span>$${fmt(spend || 0)} of $${fmt(budget)}
    <meter min="0" max=${budget} value=${spend || 0} high=${budget * 0.8} aria-label="spend against budget"></meter></span>`;
}

function body(form) {
  const out = cleaned(form, NUMERIC);
  out.models = form.models ? form.models.split(",").map((m) => m.trim()).filter(Boolean) : null;
  return out;
}

function KeyForm({ initial, teams, submit, label }) {
  const [form, set] = useState(initial);
  const [error, setError] = useState(null);
  const onSubmit = async (e) => {
    e.preventDefault(); setError(null);
    try { await submit(body(form)); } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${onSubmit} aria-label=${label}>
    <${Field} label="Name" name="name" form=${form} set=${set} required />
    <${Field} label="Role" name="role" form=${form} set=${set} options=${ROLES} />
    <${Field} label="Team" name="team" form=${form} set=${set} options=${[["", "none"], ...teams.map((t) => t.name)]} />
    <${Field} label="Models" name="models" form=${form} set=${set} placeholder="all" hint="comma-separated" />
    <${Field} label="Requests / min" name="rpm_limit" type="number" form=${form} set=${set} />
    <${Field} label="Tokens / min" name="tpm_limit" type="number" form=${form} set=${set} />
    <${Field} label="Budget (USD)" name="max_budget" type="number" form=${form} set=${set} />
    <${Field} label="Budget period" name="budget_period" form=${form} set=${set} options=${PERIODS} />
    <${Field} label="Priority" name="priority" form=${form} set=${set} options=${PRIORITIES} />
    <div class="field"><button type="submit">${label}</button></div>
    <${ErrorNote} error=${error} />
  </form>`;
}

const asForm = (k) => ({ name: k.name, role: k.role, team: k.team || "", models: (k.models || []).join(", "),
  rpm_limit: k.rpm_limit ?? "", tpm_limit: k.tpm_limit ?? "", max_budget: k.max_budget ?? "",
  budget_period: k.budget_period || "", priority: k.priority });

export function Keys() {
  const [state, reload] = useLoad(async () => ({
    keys: await apiAll("/admin/v1/keys"), teams: await apiAll("/admin/v1/teams") }));
  const [secret, setSecret] = useState(null);
  const [editing, setEditing] = useState(null);
  const [creating, setCreating] = useState(false);
  const create = async (b) => {
    const made = await api("/admin/v1/keys", { method: "POST", body: b });
    setSecret(made.secret); setCreating(false); reload();
  };
  const cols = [
    { key: "id" }, { key: "name" }, { key: "prefix" }, { key: "role" }, { key: "team" },
    { key: "models", render: (k) => (k.models ? k.models.join(", ") : "all") },
    { key: "limits", render: (k) => `${fmt(k.rpm_limit) || "∞"} rpm · ${fmt(k.tpm_limit) || "∞"} tpm` },
    { key: "priority" },
    { key: "spend", label: "spend / budget", render: (k) => html`<${Spend} spend=${k.spend} budget=${k.max_budget} />${k.budget_period ? ` per ${k.budget_period}` : ""}` },
    { key: "actions", render: (k) => html`<div class="row-actions">
      <button type="button" onClick=${() => setEditing(k)} aria-label=${`Edit key ${k.name}`}>Edit</button>
      <${Action} label="Rotate" confirm run=${async () => { setSecret((await api(`/admin/v1/keys/${k.id}/rotate`, { method: "POST", body: {} })).secret); reload(); }} />
      <${Action} label="Revoke" kind="danger" confirm run=${async () => { await api(`/admin/v1/keys/${k.id}/revoke`, { method: "POST" }); reload(); }} />
    </div>` },
  ];
  return html`<${Loaded} state=${state}>${({ keys, teams }) => html`
    ${secret ? html`<${SecretOnce} secret=${secret} onDone=${() => setSecret(null)} />` : null}
    <p><button type="button" onClick=${() => setCreating(!creating)} aria-expanded=${creating}>New key</button></p>
    ${creating ? html`<section class="card"><h2>New key</h2><${KeyForm} initial=${BLANK} teams=${teams} submit=${create} label="Create key" /></section>` : null}
    ${editing ? html`<section class="card"><h2>Edit key ${editing.name}</h2>
      <${KeyForm} initial=${asForm(editing)} teams=${teams} label="Save key"
        submit=${async (b) => { await api(`/admin/v1/keys/${editing.id}`, { method: "PATCH", body: b }); setEditing(null); reload(); }} />
      <button type="button" onClick=${() => setEditing(null)}>Cancel</button></section>` : null}
    <${Table} label="API keys" cols=${cols} rows=${keys} />`}<//>`;
}
