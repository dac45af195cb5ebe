// Audit log (operators): who changed what, searchable, newest first, with "load more".
import { api } from "../api.js";
import { ErrorNote, Field, Table, html, useEffect, useState, when } from "../ui.js";

export function Audit() {
  const [form, set] = useState({ actor: "", action: "", resource_type: "" });
  const [rows, setRows] = useState([]);
  const [cursor, setCursor] = useState(null);
  const [error, setError] = useState(null);
  const load = async (more) => {
    setError(null);
    try {
      const page = await api("/admin/v1/audit", { query: { ...form, limit: 100, cursor: more ? cursor : null } });
      setRows(more ? [...rows, ...page.data] : page.data);
      setCursor(page.next_cursor);
    } catch (e) { setRows([]); setError(e); }
  };
  useEffect(() => { load(false); }, []);
  return html`<form class="grid" aria-label="Search the audit log" onSubmit=${(e) => { e.preventDefault(); load(false); }}>
      <${Field} label="Actor contains" name="actor" form=${form} set=${set} />
      <${Field} label="Action" name="action" form=${form} set=${set} placeholder="create, update, revoke…" />
      <${Field} label="Resource type" name="resource_type" form=${form} set=${set} placeholder="api_key, backend…" />
      <div class="field"><button type="submit">Search</button></div></form>
    <${ErrorNote} error=${error} />
    <${Table} label="Audit log" rows=${rows} empty="No matching entries." cols=${[
      { key: "at", render: (a) => when(a.at) }, { key: "actor" }, { key: "action" }, { key: "resource_type", label: "resource" },
      { key: "resource_id", label: "id" },
      { key: "change", render: (a) => html`<details><summary>before / after</summary><pre>${JSON.stringify({ before: a.before, after: a.after }, null, 1)}</pre></details>` }]} />
    ${cursor ? html`<button type="button" onClick=${() => load(true)}>Load more</button>` : null}`;
}
