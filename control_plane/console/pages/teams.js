// Teams (admins): create, edit limits and budget, delete; spend against budget.
import { api, apiAll } from "../api.js";
import { Action, ErrorNote, Field, Loaded, Table, cleaned, fmt, html, useLoad, useState } from "../ui.js";
import { Spend } from "./keys.js";

const NUMERIC = ["rpm_limit", "tpm_limit", "max_budget"];
const PERIODS = [["", "lifetime"], "hour", "day", "week", "month"];

function TeamForm({ initial, submit, label, withName }) {
  const [form, set] = useState(initial);
  const [error, setError] = useState(null);
  const onSubmit = async (e) => {
    e.preventDefault(); setError(null);
    try { await submit(cleaned(form, NUMERIC)); set(initial); } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${onSubmit} aria-label=${label}>
    ${withName ? html`<${Field} label="Team name" name="name" form=${form} set=${set} required />` : null}
    <${Field} label="Requests / min" name="rpm_limit" type="number" form=${form} set=${set} />
    <${Field} label="Tokens / min" name="tpm_limit" type="number" form=${form} set=${set} />
    <${Field} label="Budget (USD)" name="max_budget" type="number" form=${form} set=${set} />
    <${Field} label="Budget period" name="budget_period" form=${form} set=${set} options=${PERIODS} />
    <div class="field"><button type="submit">${label}</button></div>
    <${ErrorNote} error=${error} />
  </form>`;
}

export function Teams() {
  const [state, reload] = useLoad(() => apiAll("/admin/v1/teams"));
  const [editing, setEditing] = useState(null);
  const blank = { name: "", rpm_limit: "", tpm_limit: "", max_budget: "", budget_period: "" };
  const cols = [
    { key: "name" }, { key: "rpm_limit", label: "rpm" }, { key: "tpm_limit", label: "tpm" },
    { key: "spend", label: "spend / budget", render: (t) => html`<${Spend} spend=${t.spend} budget=${t.max_budget} />${t.budget_period ? ` per ${t.budget_period}` : ""}` },
    { key: "actions", render: (t) => html`<div class="row-actions">
      <button type="button" onClick=${() => setEditing(t)} aria-label=${`Edit team ${t.name}`}>Edit</button>
      <${Action} label="Delete" kind="danger" confirm run=${async () => { await api(`/admin/v1/teams/${t.name}`, { method: "DELETE" }); reload(); }} /></div>` },
  ];
  return html`<section class="card"><h2>New team</h2>
      <${TeamForm} initial=${blank} withName label="Create team"
        submit=${async (b) => { await api("/admin/v1/teams", { method: "POST", body: b }); reload(); }} /></section>
    ${editing ? html`<section class="card"><h2>Edit team ${editing.name}</h2>
      <${TeamForm} label="Save team" initial=${{ rpm_limit: editing.rpm_limit ?? "", tpm_limit: editing.tpm_limit ?? "",
        max_budget: editing.max_budget ?? "", budget_period: editing.budget_period || "" }}
        submit=${async (b) => { await api(`/admin/v1/teams/${editing.name}`, { method: "PATCH", body: b }); setEditing(null); reload(); }} />
      <button type="button" onClick=${() => setEditing(null)}>Cancel</button></section>` : null}
    <${Loaded} state=${state}>${(teams) => html`<${Table} label="Teams" cols=${cols} rows=${teams} />`}<//>`;
}
