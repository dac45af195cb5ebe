// The console reads the admin REST API with the key the operator enters (kept for the tab only).
const views = {
  models: { path: "/admin/v1/models", cols: ["name", "tier", "routing", "context_length", "fallbacks"] },
  backends: { path: "/admin/v1/backends", cols: ["id", "model", "url", "engine", "state", "tier", "weight", "gpu_type"] },
  rollouts: { path: "/admin/v1/rollouts", cols: ["id", "model", "alias", "strategy", "state", "step", "weight"] },
  keys: { path: "/admin/v1/keys", cols: ["id", "name", "prefix", "team", "role", "priority", "rpm_limit", "tpm_limit", "max_budget", "budget_period", "spend", "revoked_at"] },
  teams: { path: "/admin/v1/teams", cols: ["name", "rpm_limit", "tpm_limit", "max_budget", "budget_period", "spend"] },
  audit: { path: "/admin/v1/audit", cols: ["at", "actor", "action", "resource_type", "resource_id"] },
};
let current = "models";
const $ = (id) => document.getElementById(id);

function cell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return `<code>${escapeHtml(JSON.stringify(value))}</code>`;
  return escapeHtml(String(value));
}
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

async function load() {
  const key = sessionStorage.getItem("inferplane-key");
  if (!key) { $("status").textContent = "enter a key"; return; }
  const view = views[current];
  const resp = await fetch(view.path + "?limit=200", { headers: { Authorization: `Bearer ${key}` } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    $("status").textContent = body.error ? body.error.message : `HTTP ${resp.status}`;
    $("status").className = "error";
    return;
  }
  $("status").textContent = "connected"; $("status").className = "";
  const rows = Array.isArray(body) ? body : (body.data || body.items || []);
  $("table").tHead.innerHTML = "<tr>" + view.cols.map((c) => `<th>${c}</th>`).join("") + "</tr>";
  $("table").tBodies[0].innerHTML = rows.map((r) => "<tr>" + view.cols.map((c) => `<td>${cell(r[c])}</td>`).join("") + "</tr>").join("");
  $("empty").hidden = rows.length > 0;
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("inferplane-key", $("key").value.trim());
  $("key").value = "";
  load();
});
document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => {
  document.querySelectorAll("nav button").forEach((x) => x.classList.remove("active"));
  b.classList.add("active");
  current = b.dataset.view;
  load();
}));
load();
setInterval(load, 5000);
