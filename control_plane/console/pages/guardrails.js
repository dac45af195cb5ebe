// Guardrails (operators read, admins edit): policies (their spec as JSON), the models and keys
// that use them, and bindings made or removed. The API validates every spec and names the bad key.
import { api, apiAll } from "../api.js";
import { Action, ErrorNote, Field, Loaded, Table, fmt, html, useLoad, useState } from "../ui.js";

const EXAMPLE = JSON.stringify({
  pii: { email: "mask", phone: "mask", card: "block", iban: "block", ip: "log", secret: "mask" },
  banned_terms: [], regexes: [], max_prompt_chars: null, body_log: "off",
}, null, 2);

// What a policy does, in one line: its rules by action, its limits, its body logging.
function summary(spec) {
  const parts = Object.entries(spec.pii || {}).map(([kind, action]) => `${kind}: ${action}`);
  if ((spec.banned_terms || []).length) parts.push(`${spec.banned_terms.length} banned terms: ${spec.banned_terms_action}`);
  for (const r of spec.regexes || []) parts.push(`${r.name}: ${r.action}`);
  if (spec.max_prompt_chars) parts.push(`≤ ${fmt(spec.max_prompt_chars)} chars`);
  if (spec.moderation) parts.push(`moderation (${spec.moderation.on_error})`);
  return parts.join(" · ") || "no checks";
}

function PolicyForm({ initial, label, withName, submit }) {
  const [form, set] = useState(initial);
  const [error, setError] = useState(null);
  const onSubmit = async (e) => {
    e.preventDefault(); setError(null);
    let spec;
    try { spec = JSON.parse(form.spec); } catch (err) { setError(new Error(`The spec is not JSON: ${err.message}`)); return; }
    try { await submit({ name: form.name, spec }); set(initial); } catch (err) { setError(err); }
  };
  const specId = `spec-${label.replace(/\W+/g, "-")}`;
  return html`<form class="grid" onSubmit=${onSubmit} aria-label=${label}>
    ${withName ? html`<${Field} label="Policy name" name="name" form=${form} set=${set} required />` : null}
    <div class="field wide"><label for=${specId}>Spec (JSON)</label>
      <textarea id=${specId} name="spec" rows="10" value=${form.spec}
        onInput=${(e) => set({ ...form, spec: e.target.value })}></textarea></div>
    <div class="field"><button type="submit">${label}</button></div>
    <${ErrorNote} error=${error} />
  </form>`;
}

function BindingForm({ policies, onDone }) {
  const blank = { policy: policies[0] ? policies[0].name : "", target: "model", value: "" };
  const [form, set] = useState(blank);
  const [error, setError] = useState(null);
  const onSubmit = async (e) => {
    e.preventDefault(); setError(null);
    const body = { policy: form.policy || blank.policy };
    if (form.target === "key") body.key_id = Number(form.value); else body.model = form.value;
    try { await api("/admin/v1/guardrails/bindings", { method: "PUT", body }); set(blank); onDone(); } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${onSubmit} aria-label="Bind a policy">
    <${Field} label="Policy" name="policy" form=${form} set=${set} options=${policies.map((p) => p.name)} />
    <${Field} label="Applies to" name="target" form=${form} set=${set} options=${[["model", "a model"], ["key", "a key (id)"]]} />
    <${Field} label="Model name or key id" name="value" form=${form} set=${set} required />
    <div class="field"><button type="submit">Bind</button></div>
    <${ErrorNote} error=${error} />
  </form>`;
}

export function Guardrails({ me }) {
  const admin = me.role === "admin";
  const [state, reload] = useLoad(async () => ({
    policies: await apiAll("/admin/v1/guardrails/policies"),
    bindings: await apiAll("/admin/v1/guardrails/bindings"),
  }));
  const [editing, setEditing] = useState(null);
  const policyCols = [
    { key: "name" }, { key: "rules", render: (p) => summary(p.spec) },
    { key: "directions", render: (p) => fmt(p.spec.directions) },
    { key: "body_log", label: "bodies", render: (p) => p.spec.body_log },
    { key: "models", render: (p) => fmt(p.models) }, { key: "key_ids", label: "keys", render: (p) => fmt(p.key_ids) },
    ...(admin ? [{ key: "actions", render: (p) => html`<div class="row-actions">
      <button type="button" onClick=${() => setEditing(p)} aria-label=${`Edit policy ${p.name}`}>Edit</button>
      <${Action} label="Delete" kind="danger" confirm run=${async () => { await api(`/admin/v1/guardrails/policies/${p.name}`, { method: "DELETE" }); reload(); }} /></div>` }] : []),
  ];
  const bindingCols = [
    { key: "policy" }, { key: "model" }, { key: "key_id", label: "key" },
    ...(admin ? [{ key: "actions", render: (b) => html`<${Action} label="Unbind" kind="danger"
      run=${async () => { await api(`/admin/v1/guardrails/bindings/${b.id}`, { method: "DELETE" }); reload(); }} />` }] : []),
  ];
  return html`${admin ? html`<section class="card"><h2>New policy</h2>
      <${PolicyForm} initial=${{ name: "", spec: EXAMPLE }} withName label="Create policy"
        submit=${async (b) => { await api("/admin/v1/guardrails/policies", { method: "POST", body: b }); reload(); }} /></section>` : null}
    ${editing ? html`<section class="card"><h2>Edit policy ${editing.name}</h2>
      <${PolicyForm} label="Save policy" initial=${{ name: editing.name, spec: JSON.stringify(editing.spec, null, 2) }}
        submit=${async (b) => { await api(`/admin/v1/guardrails/policies/${editing.name}`, { method: "PATCH", body: { spec: b.spec, expected_row_version: editing.row_version } }); setEditing(null); reload(); }} />
      <button type="button" onClick=${() => setEditing(null)}>Cancel</button></section>` : null}
    <${Loaded} state=${state}>${(d) => html`
      <${Table} label="Guardrail policies" cols=${policyCols} rows=${d.policies} empty="No guardrail policies: no request is inspected." />
      <section class="card"><h2>Bindings</h2>
        <p class="muted">A key's policy applies instead of its model's.</p>
        ${admin && d.policies.length ? html`<${BindingForm} policies=${d.policies} onDone=${reload} />` : null}
        <${Table} label="Guardrail bindings" cols=${bindingCols} rows=${d.bindings} empty="No bindings." /></section>`}<//>`;
}
