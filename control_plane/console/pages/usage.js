// Usage and spend (operators): by team, key, model and day over a range; charts, table, CSV.
import { api } from "../api.js";
import { COLOURS, Chart, Field, Loaded, Table, downloadCsv, html, useLoad, useState } from "../ui.js";

const METRICS = ["requests", "errors", "prompt_tokens", "completion_tokens", "cost", "cache_hits"];
// Share of requests the gateway's response cache answered.
export const hitRate = (r) => (r.requests ? `${((100 * (r.cache_hits ?? 0)) / r.requests).toFixed(1)}%` : "-");
const isoDay = (d) => d.toISOString().slice(0, 10);

export function defaultRange(days = 30) {
  const until = new Date(Date.now() + 86400e3);
  return { since: isoDay(new Date(until - days * 86400e3)), until: isoDay(until) };
}

// Per-day series for each value of `by`: [[days...], series per group].
function daySeries(rows, by, metric) {
  const days = [...new Set(rows.map((r) => r.day))].sort();
  const groups = [...new Set(rows.map((r) => String(r[by] ?? "none")))].slice(0, COLOURS.length);
  const index = Object.fromEntries(days.map((d, i) => [d, i]));
  const series = groups.map(() => days.map(() => 0));
  for (const r of rows) {
    const g = groups.indexOf(String(r[by] ?? "none"));
    if (g >= 0) series[g][index[r.day]] += r[metric];
  }
  return { data: [days.map((d) => Date.parse(d) / 1000), ...series], groups };
}

export function Usage() {
  const [form, set] = useState({ ...defaultRange(), by: "model", metric: "cost" });
  const [query, setQuery] = useState(form);
  const [state] = useLoad(async () => {
    const range = { since: `${query.since}T00:00:00Z`, until: `${query.until}T00:00:00Z` };
    const [daily, table] = await Promise.all([
      api("/admin/v1/usage", { query: { ...range, group_by: `${query.by},day` } }),
      api("/admin/v1/usage", { query: { ...range, group_by: query.by } })]);
    return { daily, table };
  }, [JSON.stringify(query)]);
  const by = query.by === "key" ? "key_id" : query.by;
  return html`<form class="grid" aria-label="Usage range" onSubmit=${(e) => { e.preventDefault(); setQuery(form); }}>
      <${Field} label="From" name="since" type="date" form=${form} set=${set} required />
      <${Field} label="To (exclusive)" name="until" type="date" form=${form} set=${set} required />
      <${Field} label="Group by" name="by" form=${form} set=${set} options=${[["model", "model"], ["team", "team"], ["key", "key"]]} />
      <${Field} label="Chart" name="metric" form=${form} set=${set} options=${METRICS} />
      <div class="field"><button type="submit">Show</button></div></form>
    <${Loaded} state=${state}>${({ daily, table }) => {
      const { data, groups } = daySeries(daily.data, by, query.metric);
      const cols = [by, ...METRICS];
      return html`
        <p data-testid="usage-totals">${`Total: ${daily.totals.requests} requests, ${daily.totals.errors} errors, ${
          daily.totals.prompt_tokens + daily.totals.completion_tokens} tokens, $${daily.totals.cost.toFixed(6)}, ${
          daily.totals.cache_hits ?? 0} cache hits (${hitRate(daily.totals)})`}</p>
        <${Chart} title=${`${query.metric} per day by ${query.by}`} data=${data}
          pad=${86400} series=${groups.map((g, i) => ({ label: g, stroke: COLOURS[i] }))} />
        <p><button type="button" onClick=${() => downloadCsv(`usage-by-${query.by}.csv`, cols, table.data)}>Export CSV</button>
          <button type="button" onClick=${() => downloadCsv(`usage-by-${query.by}-per-day.csv`, [by, "day", ...METRICS], daily.data)}>Export CSV per day</button></p>
        <${Table} label=${`Usage by ${query.by}`} rows=${table.data.map((r) => ({ ...r, hit_rate: hitRate(r) }))}
          cols=${[...cols, "hit_rate"].map((k) => ({ key: k, label: k === "key_id" ? "key" : k === "hit_rate" ? "cache hit rate" : k }))} empty="No usage in this range." />`;
    }}<//>`;
}
