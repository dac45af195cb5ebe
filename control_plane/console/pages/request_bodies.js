// One request's stored bodies (admins): request and response as the guardrail policy redacted
// them, whether each was truncated, and what the guardrails found.
import { api } from "../api.js";
import { Loaded, fmt, html, useLoad } from "../ui.js";

function Body({ title, text, chars, truncated }) {
  if (text === null || text === undefined) return html`<p class="muted">${title}: ${fmt(chars)} characters (not stored).</p>`;
  return html`<h3>${title}${truncated ? html` <small>(truncated from ${fmt(chars)} characters)</small>` : null}</h3>
    <pre data-testid=${title.toLowerCase()}>${text}</pre>`;
}

export function Bodies({ requestId, onClose }) {
  const [state] = useLoad(() => api(`/admin/v1/requests/${encodeURIComponent(requestId)}/bodies`), [requestId]);
  return html`<section class="card bodies" aria-label="Request bodies"><h2>Request ${requestId}</h2>
    <${Loaded} state=${state}>${(page) => page.data.map((b) => html`<div key=${b.id}>
      <p class="muted">policy ${b.policy} · ${b.mode}${(b.findings || []).length ? ` · found: ${b.findings.map((f) => `${f.rule} ${f.action} ${f.direction} ×${f.count}`).join(", ")}` : ""}</p>
      <${Body} title="Request" text=${b.request_body} chars=${b.request_chars} truncated=${b.request_truncated} />
      <${Body} title="Response" text=${b.response_body} chars=${b.response_chars} truncated=${b.response_truncated} /></div>`)}<//>
    <button type="button" onClick=${onClose}>Close</button></section>`;
}
