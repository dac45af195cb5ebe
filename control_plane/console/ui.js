// Shared widgets: data loading that never shows another page's rows, tables, forms, charts.
import { html, useCallback, useEffect, useRef, useState } from "./vendor/preact-htm.module.js";

export { html, useCallback, useEffect, useRef, useState };

// const [state, reload] = useLoad(() => api(...), [deps]) — state: {data, error, loading}.
// The data is dropped whenever deps change, so a failed load never leaves old rows on screen.
export function useLoad(fn, deps = []) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const seq = useRef(0);
  const reload = useCallback(async () => {
    const mine = ++seq.current;
    setState((s) => ({ ...s, loading: true }));
    try {
      const data = await fn();
      if (mine === seq.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === seq.current) setState({ data: null, error, loading: false });
    }
  }, deps);
  useEffect(() => { setState({ data: null, error: null, loading: true }); reload(); }, [reload]);
  return [state, reload];
}

export function Loaded({ state, children }) {
  if (state.error) return html`<${ErrorNote} error=${state.error} />`;
  if (state.data === null) return html`<p class="muted" aria-live="polite">Loading…</p>`;
  return children(state.data);
}

export function ErrorNote({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error.message || String(error)}</p>`;
}

export function fmt(value) {
  if (value === null || value === undefined || value === "") return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(value < 1 ? 4 : 2);
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

// cols: [{key, label, render?(row)}]; rows: objects. `label` names the table for screen readers.
export function Table({ cols, rows, label, empty = "Nothing here yet." }) {
  if (!rows.length) return html`<p class="muted">${empty}</p>`;
  return html`<div class="scroll"><table aria-label=${label}>
    <thead><tr>${cols.map((c) => html`<th scope="col">${c.label || c.key}</th>`)}</tr></thead>
    <tbody>${rows.map((r, i) => html`<tr key=${r.id ?? i}>${cols.map((c) =>
      html`<td data-col=${c.key}>${c.render ? c.render(r) : fmt(r[c.key])}</td>`)}</tr>`)}</tbody>
  </table></div>`;
}

let fieldIds = 0;

// A labelled input bound to form[name]; options turns it into a select.
export function Field({ label, name, form, set, type = "text", options, required, placeholder, hint }) {
  const id = useRef(`f-${name}-${++fieldIds}`).current;  // unique even when forms share names
  const values = (options || []).map((o) => (Array.isArray(o) ? o[0] : o));
  // A select shows its first option until one is picked; the form reads "" as that choice.
  const value = options && !values.includes(form[name] ?? "") ? values[0] : (form[name] ?? "");
  const onInput = (e) => set({ ...form, [name]: type === "checkbox" ? e.target.checked : e.target.value });
  const input = options
    ? html`<select id=${id} name=${name} value=${value} onChange=${onInput} required=${required}>
        ${options.map((o) => (Array.isArray(o) ? html`<option value=${o[0]}>${o[1]}</option>` : html`<option value=${o}>${o}</option>`))}
      </select>`
    : html`<input id=${id} name=${name} type=${type} value=${value} checked=${type === "checkbox" ? !!value : undefined}
        onInput=${onInput} required=${required} placeholder=${placeholder} step=${type === "number" ? "any" : undefined} />`;
  return html`<div class="field"><label for=${id}>${label}</label>${input}${hint ? html`<small>${hint}</small>` : null}</div>`;
}

// Empty strings become null and numeric fields numbers, so the API sees what was meant.
export function cleaned(form, numeric = []) {
  const out = {};
  for (const [k, v] of Object.entries(form)) {
    if (v === "" || v === undefined) out[k] = null;
    else out[k] = numeric.includes(k) ? Number(v) : v;
  }
  return out;
}

// A button that runs an async action, shows "…" while it runs and reports failure next to it.
export function Action({ label, run, kind = "", confirm, disabled }) {
  const [busy, setBusy] = useState(false);
  const [armed, setArmed] = useState(false);
  const [error, setError] = useState(null);
  const click = async () => {
    if (confirm && !armed) { setArmed(true); return; }
    setArmed(false); setBusy(true); setError(null);
    try { await run(); } catch (e) { setError(e); } finally { setBusy(false); }
  };
  return html`<span class="action"><button type="button" class=${kind} disabled=${busy || disabled} onClick=${click}>
      ${armed ? `Confirm ${label.toLowerCase()}` : busy ? `${label}…` : label}</button>
    ${error ? html`<span class="error" role="alert">${error.message}</span>` : null}</span>`;
}

// The secret of a new or rotated key: shown once, with a copy button.
export function SecretOnce({ secret, onDone }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try { await navigator.clipboard.writeText(secret); setCopied(true); } catch { setCopied(false); }
  };
  return html`<div class="secret" role="status">
    <p><strong>Copy this key now.</strong> It is shown only once; Inferplane stores only its hash.</p>
    <code data-testid="secret">${secret}</code>
    <button type="button" onClick=${copy}>${copied ? "Copied" : "Copy"}</button>
    <button type="button" onClick=${onDone}>Done</button></div>`;
}

// A uPlot line chart. data: [xs (unix seconds), ...series]; series: [{label, stroke}].
// `pad` widens a one-point x range (seconds) so it is not stretched over years.
export function Chart({ title, data, series, height = 220, pad = 60 }) {
  const el = useRef(null);
  useEffect(() => {
    if (!el.current || !window.uPlot || !data[0].length) return undefined;
    const plot = new window.uPlot({
      title, width: Math.max(320, el.current.clientWidth - 8), height,
      series: [{}, ...series.map((s) => ({ width: 2, points: { show: true }, ...s }))],
      // uPlot widens a single x value by 86400e3 s; centre it in ±pad instead.
      scales: { x: { time: true, range: (u, min, max) => (u.data[0].length === 1 ? [u.data[0][0] - pad, u.data[0][0] + pad] : [min, max]) } },
      axes: [{}, { size: 60 }],
    }, data, el.current);
    return () => plot.destroy();
  }, [JSON.stringify(data), title]);
  if (!data[0].length) return html`<p class="muted">${title}: no data in this range.</p>`;
  return html`<figure class="chart" aria-label=${title} ref=${el}></figure>`;
}

export const COLOURS = ["#3867d6", "#e55039", "#20bf6b", "#f7b731", "#8854d0", "#0fb9b1"];

export function downloadCsv(filename, cols, rows) {
  const quote = (v) => { const s = fmt(v); return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s; };
  const text = [cols.join(","), ...rows.map((r) => cols.map((c) => quote(r[c])).join(","))].join("\n");
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text + "\n"], { type: "text/csv" }));
  a.download = filename;
  a.click();
  URL.revokeObjectURL(a.href);
}
