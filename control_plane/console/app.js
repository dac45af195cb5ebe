// The console shell: sign-in with a key, the pages the signed-in role may use, hash routing.
// The API enforces every permission; hiding pages only spares people buttons that would 403.
import { render } from "./vendor/preact-htm.module.js";
import { api, session } from "./api.js";
import { ErrorNote, html, useEffect, useState } from "./ui.js";
import { Audit } from "./pages/audit.js";
import { Guardrails } from "./pages/guardrails.js";
import { Keys } from "./pages/keys.js";
import { Models } from "./pages/models.js";
import { Overview } from "./pages/overview.js";
import { Playground } from "./pages/playground.js";
import { Requests } from "./pages/requests.js";
import { Rollouts } from "./pages/rollouts.js";
import { Teams } from "./pages/teams.js";
import { Usage } from "./pages/usage.js";

const RANK = { user: 0, operator: 1, admin: 2 };
export const PAGES = [
  { id: "overview", label: "Overview", role: "operator", view: Overview },
  { id: "keys", label: "Keys", role: "admin", view: Keys },
  { id: "teams", label: "Teams", role: "admin", view: Teams },
  { id: "models", label: "Models", role: "operator", view: Models },
  { id: "rollouts", label: "Rollouts", role: "operator", view: Rollouts },
  { id: "usage", label: "Usage", role: "operator", view: Usage },
  { id: "requests", label: "Requests", role: "operator", view: Requests },
  { id: "guardrails", label: "Guardrails", role: "operator", view: Guardrails },
  { id: "playground", label: "Playground", role: "user", view: Playground },
  { id: "audit", label: "Audit log", role: "operator", view: Audit },
];

const allowed = (me) => PAGES.filter((p) => RANK[me.role] >= RANK[p.role]);
const routeId = () => location.hash.replace(/^#\/?/, "");

function SignIn({ onSignedIn }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    session.signIn(key.trim());
    try { onSignedIn(await api("/admin/v1/whoami")); } catch (err) { session.signOut(); setError(err); }
  };
  return html`<main class="signin"><form onSubmit=${submit} aria-labelledby="signin-title">
    <h1 id="signin-title">Sign in to Inferplane</h1>
    <div class="field"><label for="signin-key">API key or JWT</label>
      <input id="signin-key" type="password" autocomplete="off" required value=${key}
        onInput=${(e) => setKey(e.target.value)} placeholder="ip-…" /></div>
    <button type="submit">Sign in</button>
    <${ErrorNote} error=${error} />
    <p class="muted">The key is kept in this browser tab only and sent to the API on each call.</p>
  </form></main>`;
}

function Shell({ me, onSignOut }) {
  const pages = allowed(me);
  const [route, setRoute] = useState(routeId());
  useEffect(() => {
    const onHash = () => setRoute(routeId());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  const page = pages.find((p) => p.id === route) || pages[0];
  useEffect(() => { document.title = `${page.label} · Inferplane`; }, [page.id]);
  return html`<header>
      <span class="brand">Inferplane</span>
      <nav aria-label="Console pages"><ul>${pages.map((p) => html`<li><a href=${`#/${p.id}`}
        aria-current=${p.id === page.id ? "page" : undefined}>${p.label}</a></li>`)}</ul></nav>
      <span class="who" data-testid="who">${me.name} · ${me.role}</span>
      <button type="button" onClick=${onSignOut}>Sign out</button>
    </header>
    <main id="page" key=${page.id}><h1>${page.label}</h1><${page.view} me=${me} /></main>`;
}

function App() {
  const [me, setMe] = useState(null);
  const [checked, setChecked] = useState(!session.key());
  useEffect(() => {
    if (!session.key()) return;
    api("/admin/v1/whoami").then(setMe, () => session.signOut()).finally(() => setChecked(true));
  }, []);
  if (!checked) return html`<p class="muted">Loading…</p>`;
  if (!me) return html`<${SignIn} onSignedIn=${setMe} />`;
  return html`<${Shell} me=${me} onSignOut=${() => { session.signOut(); setMe(null); location.hash = ""; }} />`;
}

render(html`<${App} />`, document.getElementById("app"));
