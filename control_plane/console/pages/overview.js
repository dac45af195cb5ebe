// Overview (operators): traffic, errors, latency and TTFT percentiles, tokens and spend over
// time per model, backends by state, active rollouts, and alerts drawn from the same figures.
import { api, apiAll } from "../api.js";
import { COLOURS, Chart, Loaded, Table, fmt, html, useLoad } from "../ui.js";
import { LIVE } from "./models.js";
import { defaultRange } from "./usage.js";

const ACTIVE = ["pending", "progressing", "paused", "promoting", "aborting"];

export function percentile(values, q) {
  const xs = values.filter((v) => v !== null && v !== undefined).sort((a, b) => a - b);
  if (!xs.length) return null;
  return xs[Math.min(xs.length - 1, Math.floor(q * xs.length))];
}

// What would page someone, from the recent requests and the fleet's state.
export function alerts({ recent, backends, rollouts }) {
  const out = [];
  const errors = recent.filter((r) => r.status === "error").length;
  if (recent.length >= 20 && errors / recent.length > 0.05) {
    out.push(`Error rate ${(100 * errors / recent.length).toFixed(1)}% over the last ${recent.length} requests (above 5%)`);
  }
  const p95 = percentile(recent.map((r) => r.ttft_ms), 0.95);
  if (p95 !== null && p95 > 2000) out.push(`TTFT p95 ${Math.round(p95)} ms (above 2000 ms)`);
  for (const b of backends.filter((x) => x.state === "down")) out.push(`Backend ${b.id} (${b.url}) is down`);
  for (const b of backends.filter((x) => x.live && x.live.breaker !== "closed")) out.push(`Backend ${b.id} breaker is ${b.live.breaker}`);
  for (const b of backends.filter((x) => x.live && x.live.kv_usage > 0.9)) out.push(`Backend ${b.id} KV cache ${Math.round(100 * b.live.kv_usage)}% full`);
  for (const r of rollouts.filter((x) => x.state === "paused")) out.push(`Rollout ${r.id} of ${r.model} is paused: ${r.reason || "by an operator"}`);
  return out;
}

function perModelDaily(rows, metric) {
  const days = [...new Set(rows.map((r) => r.day))].sort();
  const models = [...new Set(rows.map((r) => r.model))].slice(0, COLOURS.length);
  const data = [days.map((d) => Date.parse(d) / 1000), ...models.map((m) => days.map((d) =>
    rows.filter((r) => r.model === m && r.day === d).reduce((s, r) => s + metric(r), 0)))];
  return { data, series: models.map((m, i) => ({ label: m, stroke: COLOURS[i] })) };
}

function Stat({ label, value }) {
  return html`<div class="stat"><span class="stat-value">${value}</span><span class="stat-label">${label}</span></div>`;
}

export function Overview() {
  const [state] = useLoad(async () => {
    const range = defaultRange(14);
    const hourAgo = (h) => new Date(Math.floor(Date.now() / 3600e3 - h) * 3600e3).toISOString();
    const [usage, hourly, recent, backends, rollouts, models] = await Promise.all([
      api("/admin/v1/usage", { query: { since: `${range.since}T00:00:00Z`, until: `${range.until}T00:00:00Z`, group_by: "model,day" } }),
      api("/admin/v1/usage", { query: { since: hourAgo(23), until: hourAgo(-1), group_by: "hour" } }),
      api("/admin/v1/requests", { query: { limit: 500 } }), apiAll("/admin/v1/backends"),
      api("/admin/v1/rollouts", { query: { limit: 100 } }), apiAll("/admin/v1/models")]);
    const live = Object.fromEntries((await api("/admin/v1/backend-status")).data.map((b) => [b.id, b]));
    return { usage, hourly: hourly.data, recent: recent.data, backends: backends.map((b) => ({ ...b, live: live[String(b.id)] })),
      rollouts: rollouts.data, models };
  });
  return html`<${Loaded} state=${state}>${({ usage, hourly, recent, backends, rollouts, models }) => {
    const t = usage.totals;
    const names = Object.fromEntries(models.map((m) => [m.id, m.name]));
    const ms = (v) => (v === null ? "–" : `${Math.round(v)} ms`);
    const lat = recent.map((r) => r.latency_ms), ttft = recent.map((r) => r.ttft_ms);
    const byState = {};
    for (const b of backends) byState[b.state] = (byState[b.state] || 0) + 1;
    const active = rollouts.filter((r) => ACTIVE.includes(r.state));
    const fired = alerts({ recent, backends, rollouts });
    const hours = hourly.map((r) => Date.parse(`${r.hour.replace(" ", "T")}:00Z`) / 1000);
    const traffic = { data: [hours, hourly.map((r) => r.requests), hourly.map((r) => r.errors)],
      series: [{ label: "requests", stroke: COLOURS[0] }, { label: "errors", stroke: COLOURS[1] }] };
    const reqs = perModelDaily(usage.data, (r) => r.requests);
    const toks = perModelDaily(usage.data, (r) => r.prompt_tokens + r.completion_tokens);
    const spend = perModelDaily(usage.data, (r) => r.cost);
    return html`
      <section aria-label="Alerts" class=${fired.length ? "card alerts" : "card"}><h2>Alerts</h2>
        ${fired.length ? html`<ul>${fired.map((a) => html`<li role="alert">${a}</li>`)}</ul>` : html`<p class="muted">Nothing would fire.</p>`}</section>
      <div class="stats">
        <${Stat} label="requests (14 days)" value=${t.requests} />
        <${Stat} label="errors (14 days)" value=${t.errors} />
        <${Stat} label="tokens (14 days)" value=${t.prompt_tokens + t.completion_tokens} />
        <${Stat} label="spend (14 days)" value=${`$${fmt(t.cost)}`} />
        <${Stat} label=${`latency p50 / p95 (last ${recent.length})`} value=${`${ms(percentile(lat, 0.5))} / ${ms(percentile(lat, 0.95))}`} />
        <${Stat} label=${`TTFT p50 / p95 (last ${recent.length})`} value=${`${ms(percentile(ttft, 0.5))} / ${ms(percentile(ttft, 0.95))}`} />
      </div>
      <div class="charts">
        <${Chart} title="Requests and errors per hour (24 hours)" pad=${3600} ...${traffic} />
        <${Chart} title="Requests per day by model" pad=${86400} ...${reqs} />
        <${Chart} title="Tokens per day by model" pad=${86400} ...${toks} />
        <${Chart} title="Spend (USD) per day by model" pad=${86400} ...${spend} />
      </div>
      <section class="card"><h2>Backends by state</h2>
        <p>${Object.entries(byState).map(([s, n]) => html`<span class=${`badge ${s}`}>${s}: ${n}</span> `)}</p>
        <${Table} label="Backends" rows=${backends} cols=${[{ key: "id" }, { key: "model", render: (b) => names[b.model_id] || b.model_id },
          { key: "version" }, { key: "url" }, { key: "state" }, { key: "tier" }, { key: "weight" }, ...LIVE]} /></section>
      <section class="card"><h2>Active rollouts</h2><${Table} label="Active rollouts" rows=${active} empty="No active rollouts."
        cols=${[{ key: "id" }, { key: "model" }, { key: "strategy" }, { key: "state", label: "phase" }, { key: "weight" }, { key: "candidate_version", label: "candidate" }]} /></section>`;
  }}<//>`;
}
