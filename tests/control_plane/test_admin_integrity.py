"""No lockouts, no dangling references: the last admin key stays, a key's team exists, the
audit log keeps key records from operators, and nothing a live rollout, an alias or a fallback
depends on can be deleted."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

ADMIN_KEY_ID = 1  # build_admin_app creates the admin key first


async def _key(env, **body):
    r = await env.client.post("/admin/v1/keys", json={"name": "k", **body},
                              headers=env.auth("admin"))
    assert r.status_code == 201, r.text
    return r.json()


async def test_the_last_active_admin_key_cannot_be_revoked_demoted_or_expired(env):
    h, kid = env.auth("admin"), ADMIN_KEY_ID
    later = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    for method, path, body in (("POST", f"/admin/v1/keys/{kid}/revoke", None),
                               ("PATCH", f"/admin/v1/keys/{kid}", {"role": "operator"}),
                               ("PATCH", f"/admin/v1/keys/{kid}", {"expires_at": later})):
        r = await env.client.request(method, path, json=body, headers=h)
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "last_admin" and "last active admin" in r.text
    me = await env.client.get(f"/admin/v1/keys/{kid}", headers=h)
    assert me.json()["role"] == "admin" and me.json()["expires_at"] is None
    # An expired or revoked admin key does not count as a second admin ...
    past = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()
    await _key(env, role="admin", expires_at=past)
    assert (await env.client.post(f"/admin/v1/keys/{kid}/revoke", headers=h)).status_code == 409
    # ... a live one does: then the first can go.
    other = await _key(env, role="admin")
    r = await env.client.patch(f"/admin/v1/keys/{kid}", json={"role": "operator"}, headers=h)
    assert r.status_code == 200 and r.json()["role"] == "operator"
    other_h = {"Authorization": f"Bearer {other['secret']}"}
    r = await env.client.post(f"/admin/v1/keys/{other['id']}/revoke", headers=other_h)
    assert r.status_code == 409  # the new admin is now the last one


async def test_a_key_must_name_an_existing_team(env):
    h = env.auth("admin")
    r = await env.client.post("/admin/v1/keys", json={"name": "k", "team": "ghost"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["param"] == "team"
    assert "ghost" in r.json()["error"]["message"]
    assert (await env.client.post("/admin/v1/teams", json={"name": "ml"}, headers=h)).status_code == 201
    key = await _key(env, team="ml")
    r = await env.client.patch(f"/admin/v1/keys/{key['id']}", json={"team": "ghost"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "team_not_found"
    # A team its keys still name cannot be deleted out from under them.
    r = await env.client.delete("/admin/v1/teams/ml", headers=h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "team_in_use"
    await env.client.post(f"/admin/v1/keys/{key['id']}/revoke", headers=h)
    assert (await env.client.delete("/admin/v1/teams/ml", headers=h)).status_code == 204


async def test_operators_read_the_audit_log_without_key_or_team_records(env):
    h = env.auth("admin")
    await env.client.post("/admin/v1/teams", json={"name": "ml"}, headers=h)
    await _key(env, name="needle-key", team="ml", models=["secret-model"])
    await env.client.post("/admin/v1/models", json={"name": "m"}, headers=env.auth("operator"))
    admin_view = (await env.client.get("/admin/v1/audit", headers=h)).json()["data"]
    assert {e["resource_type"] for e in admin_view} == {"api_key", "team", "model"}
    r = await env.client.get("/admin/v1/audit", headers=env.auth("operator"))
    assert r.status_code == 200
    assert [e["resource_type"] for e in r.json()["data"]] == ["model"]
    assert "secret-model" not in r.text and "needle-key" not in r.text and '"ml"' not in r.text
    for kind in ("api_key", "team"):
        r = await env.client.get("/admin/v1/audit", params={"resource_type": kind},
                                 headers=env.auth("operator"))
        assert r.status_code == 403 and r.json()["error"]["param"] == "resource_type"


async def _rollout_setup(env):
    h = env.auth("operator")
    for name in ("m", "backup"):
        assert (await env.client.post("/admin/v1/models", json={"name": name}, headers=h)).status_code == 201
    for label in ("v1", "v2"):
        await env.client.post("/admin/v1/models/m/versions", json={"version": label}, headers=h)
    await env.client.put("/admin/v1/models/m/aliases/default", json={"version": "v1"}, headers=h)
    await env.client.put("/admin/v1/models/m/aliases/canary", json={"version": "v1"}, headers=h)
    r = await env.client.post("/admin/v1/rollouts", headers=h, json={
        "model": "m", "alias": "canary", "candidate_version": "v2", "steps": [{"weight": 0.5}]})
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def test_what_a_live_rollout_depends_on_cannot_be_deleted(env):
    rollout = await _rollout_setup(env)
    h = env.auth("operator")
    for path, code in (("/admin/v1/models/m", "model_in_use"),
                       ("/admin/v1/models/m/versions/v2", "version_in_use"),
                       ("/admin/v1/models/m/versions/v1", "version_in_use"),
                       ("/admin/v1/models/m/aliases/canary", "alias_in_use")):
        r = await env.client.delete(path, headers=h)
        assert r.status_code == 409, (path, r.text)
        assert r.json()["error"]["code"] == code and f"rollout {rollout}" in r.json()["error"]["message"]
    assert (await env.client.get(f"/admin/v1/rollouts/{rollout}", headers=h)).status_code == 200
    # An alias the rollout does not move can go.
    assert (await env.client.delete("/admin/v1/models/m/aliases/default", headers=h)).status_code == 204


async def test_a_version_an_alias_serves_and_a_model_others_fall_back_to_stay(env):
    h = env.auth("operator")
    await env.client.post("/admin/v1/models", json={"name": "backup"}, headers=h)
    await env.client.post("/admin/v1/models", json={"name": "m", "fallbacks": ["backup"]}, headers=h)
    await env.client.post("/admin/v1/models/m/versions", json={"version": "v1"}, headers=h)
    await env.client.put("/admin/v1/models/m/aliases/prod", json={"version": "v1"}, headers=h)
    r = await env.client.delete("/admin/v1/models/m/versions/v1", headers=h)
    assert r.status_code == 409 and "alias(es) prod" in r.json()["error"]["message"]
    r = await env.client.delete("/admin/v1/models/backup", headers=h)
    assert r.status_code == 409 and "fallbacks of model(s) m" in r.json()["error"]["message"]
    await env.client.patch("/admin/v1/models/m", json={"fallbacks": []}, headers=h)
    assert (await env.client.delete("/admin/v1/models/backup", headers=h)).status_code == 204
