// Rollouts (operators): start canary / blue-green / shadow, watch each analysis measurement as
// candidate-vs-stable charts, and promote, pause, resume or abort.
import { api, apiAll } from "../api.js";
import { Action, COLOURS, Chart, ErrorNote, Field, Loaded, Table, fmt, html, useEffect, useLoad, useState, when } from "../ui.js";

const ACTIONS = {  // which buttons make sense in which phase (the API checks again)
  promote: ["pending", "progressing", "paused"], pause: ["pending", "progressing"],
  resume: ["paused"], abort: ["pending", "progressing", "paused"],
};

export function parseSteps(text) {
  // "0.1:60, 0.5:120, 1" → [{weight: 0.1, pause_s: 60}, ...]
  return text.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
    const [w, p] = s.split(":");
    return { weight: Number(w), pause_s: p ? Number(p) : 0 };
  });
}

function StartForm({ models, started }) {
  const [form, set] = useState({ model: models[0] ? models[0].name : "", alias: "default", candidate_version: "",
    strategy: "canary", steps: "0.1:60, 0.5:60", interval_s: "60", min_requests: "20", max_error_rate: "0.05",
    max_p95_latency_ratio: "", failure_limit: "0" });
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault(); setError(null);
    const analysis = { interval_s: Number(form.interval_s), min_requests: Number(form.min_requests),
      failure_limit: Number(form.failure_limit) };
    if (form.max_error_rate !== "") analysis.max_error_rate = Number(form.max_error_rate);
    if (form.max_p95_latency_ratio !== "") analysis.max_p95_latency_ratio = Number(form.max_p95_latency_ratio);
    const checked = "max_error_rate" in analysis || "max_p95_latency_ratio" in analysis;
    try {
      const made = await api("/admin/v1/rollouts", { method: "POST", body: {
        model: form.model, alias: form.alias, candidate_version: form.candidate_version,
        strategy: form.strategy, steps: parseSteps(form.steps), analysis: checked ? analysis : null } });
      started(made.id);
    } catch (err) { setError(err); }
  };
  return html`<form class="grid" onSubmit=${submit} aria-label="Start a rollout">
    <${Field} label="Model" name="model" form=${form} set=${set} options=${models.map((m) => m.name)} />
    <${Field} label="Alias" name="alias" form=${form} set=${set} required />
    <${Field} label="Candidate version" name="candidate_version" form=${form} set=${set} required />
    <${Field} label="Strategy" name="strategy" form=${form} set=${set} options=${[["canary", "canary"], ["blue_green", "blue-green"], ["shadow", "shadow"]]} />
    <${Field} label="Steps" name="steps" form=${form} set=${set} hint="weight:pause_s, comma-separated" />
    <${Field} label="Analysis interval (s)" name="interval_s" type="number" form=${form} set=${set} />
    <${Field} label="Minimum requests" name="min_requests" type="number" form=${form} set=${set} />
    <${Field} label="Max error rate" name="max_error_rate" type="number" form=${form} set=${set} hint="fraction, e.g. 0.05; no limits: no analysis" />
    <${Field} label="Max p95 latency ratio" name="max_p95_latency_ratio" type="number" form=${form} set=${set} />
    <${Field} label="Failures tolerated" name="failure_limit" type="number" form=${form} set=${set} />
    <div class="field"><button type="submit">Start rollout</button></div>
    <${ErrorNote} error=${error} /></form>`;
}

const SERIES = [["error_rate", "error rate"], ["p95_latency_s", "p95 latency (s)"], ["ttft_p95_s", "TTFT p95 (s)"]];

function Measurements({ rows }) {
  const xs = rows.map((m) => Date.parse(m.at) / 1000);
  const side = (name, field) => rows.map((m) => (m.result && m.result[name] ? m.result[name][field] : null));
  return html`<div class="charts">${SERIES.map(([field, title]) => html`<${Chart} title=${`${title}: candidate vs stable`}
      data=${[xs, side("candidate", field), side("stable", field)]}
      series=${[{ label: "candidate", stroke: COLOURS[1] }, { label: "stable", stroke: COLOURS[0] }]} />`)}</div>
    <${Table} label="Measurements" rows=${rows.slice().reverse()} cols=${[
      { key: "at", render: (m) => when(m.at) }, { key: "step" }, { key: "weight" },
      { key: "verdict", render: (m) => (m.result ? m.result.verdict : "") }, { key: "message" }]} />`;
}

function Detail({ id, onChanged }) {
  const [state, reload] = useLoad(() => api(`/admin/v1/rollouts/${id}`), [id]);
  useEffect(() => { const t = setInterval(reload, 3000); return () => clearInterval(t); }, [reload]);
  const phase = state.data && state.data.state;
  useEffect(() => { if (phase) onChanged(); }, [phase]);  // keep the list's phase column in step
  return html`<${Loaded} state=${state}>${(r) => html`<section class="card" aria-label=${`Rollout ${r.id}`}>
    <h2>Rollout ${r.id}: ${r.model} ${r.stable_version || "–"} → ${r.candidate_version}</h2>
    <p>Phase <strong data-testid="rollout-state">${r.state}</strong> · ${r.strategy} · step ${r.step} of ${r.steps}
      · candidate weight ${fmt(r.weight)} · failures ${r.failures}${r.reason ? html` · <span>${r.reason}</span>` : null}</p>
    <div class="row-actions">${Object.entries(ACTIONS).filter(([, phases]) => phases.includes(r.state)).map(([action]) =>
      html`<${Action} label=${action[0].toUpperCase() + action.slice(1)} kind=${action === "abort" ? "danger" : ""}
        confirm=${action === "abort" || action === "promote"}
        run=${async () => { await api(`/admin/v1/rollouts/${id}/${action}`, { method: "POST" }); reload(); onChanged(); }} />`)}</div>
    <h3>Analysis</h3><${Measurements} rows=${r.measurements} />
    <h3>Events</h3><${Table} label="Rollout events" rows=${r.events.slice().reverse()} cols=${[
      { key: "at", render: (e) => when(e.at) }, { key: "kind" }, { key: "step" }, { key: "weight" }, { key: "message" }]} />
  </section>`}<//>`;
}

export function Rollouts() {
  const [state, reload] = useLoad(async () => ({
    rollouts: (await api("/admin/v1/rollouts", { query: { limit: 100 } })).data,
    models: await apiAll("/admin/v1/models") }));
  const [open, setOpen] = useState(null);
  const [starting, setStarting] = useState(false);
  useEffect(() => { const t = setInterval(reload, 5000); return () => clearInterval(t); }, [reload]);
  const cols = [
    { key: "id", render: (r) => html`<button type="button" class="link" onClick=${() => setOpen(r.id)}>#${r.id}</button>` },
    { key: "model" }, { key: "alias" }, { key: "strategy" }, { key: "state", label: "phase" },
    { key: "versions", render: (r) => `${r.stable_version || "–"} → ${r.candidate_version}` },
    { key: "step", render: (r) => `${r.step} / ${r.steps}` }, { key: "weight" },
    { key: "created_at", label: "started", render: (r) => when(r.created_at) }];
  return html`<${Loaded} state=${state}>${({ rollouts, models }) => html`
    <p><button type="button" aria-expanded=${starting} onClick=${() => setStarting(!starting)}>New rollout</button></p>
    ${starting ? html`<section class="card"><h2>Start a rollout</h2>
      <${StartForm} models=${models} started=${(id) => { setStarting(false); setOpen(id); reload(); }} /></section>` : null}
    <${Table} label="Rollouts" cols=${cols} rows=${rollouts} empty="No rollouts yet." />
    ${open ? html`<${Detail} id=${open} onChanged=${reload} />` : null}`}<//>`;
}
