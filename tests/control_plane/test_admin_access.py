"""RBAC on the admin API, API keys (secret shown once, revoke, rotate) and teams."""

from __future__ import annotations

import pytest

from common.auth.keys import hash_key


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/admin/v1/models", None),
    ("POST", "/admin/v1/models", {"name": "x"}),
    ("PUT", "/admin/v1/models/x/aliases/default", {"version": "v1"}),
    ("GET", "/admin/v1/keys", None),
    ("POST", "/admin/v1/teams", {"name": "t"}),
    ("GET", "/admin/v1/audit", None),
])
async def test_no_key_is_401_and_user_key_is_403(env, method, path, body):
    r = await env.client.request(method, path, json=body)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = await env.client.request(method, path, json=body, headers={"Authorization": "Bearer ip-nope"})
    assert r.status_code == 401
    r = await env.client.request(method, path, json=body, headers=env.auth("user"))
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"


async def test_operators_manage_models_but_not_keys_or_teams(env):
    h = env.auth("operator")
    assert (await env.client.post("/admin/v1/models", json={"name": "m"}, headers=h)).status_code == 201
    assert (await env.client.get("/admin/v1/keys", headers=h)).status_code == 403
    assert (await env.client.post("/admin/v1/keys", json={"name": "k"}, headers=h)).status_code == 403
    assert (await env.client.get("/admin/v1/teams", headers=h)).status_code == 403


async def test_key_secret_is_shown_once_and_works_at_once(env):
    h = env.auth("admin")
    assert (await env.client.post("/admin/v1/teams", headers=h, json={"name": "ml"})).status_code == 201
    r = await env.client.post("/admin/v1/keys", headers=h, json={
        "name": "ci", "role": "operator", "team": "ml", "models": ["chat"], "rpm_limit": 60,
        "priority": "batch", "expires_in_s": 3600, "max_budget": 25, "budget_period": "week"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["budget_period"] == "week" and created["max_budget"] == 25
    secret, key_id = created["secret"], created["id"]
    assert secret.startswith("ip-") and created["prefix"] == secret[:len(created["prefix"])]
    assert "key_hash" not in created

    listed = (await env.client.get("/admin/v1/keys", headers=h)).text
    fetched = (await env.client.get(f"/admin/v1/keys/{key_id}", headers=h)).text
    audit = (await env.client.get("/admin/v1/audit", headers=h)).text
    for text in (listed, fetched, audit):
        assert secret not in text and hash_key(secret) not in text and '"secret"' not in text

    view = env.source.current.keys[hash_key(secret)]
    assert (view.role, view.team, view.models, view.priority) == ("operator", "ml", ("chat",), "batch")
    new = {"Authorization": f"Bearer {secret}"}
    assert (await env.client.get("/admin/v1/models", headers=new)).status_code == 200

    r = await env.client.post(f"/admin/v1/keys/{key_id}/rotate", headers=h)
    rotated = r.json()["secret"]
    assert rotated != secret
    assert (await env.client.get("/admin/v1/models", headers=new)).status_code == 401
    newer = {"Authorization": f"Bearer {rotated}"}
    assert (await env.client.get("/admin/v1/models", headers=newer)).status_code == 200

    r = await env.client.post(f"/admin/v1/keys/{key_id}/revoke", headers=h)
    assert r.json()["revoked"] is True
    r = await env.client.get("/admin/v1/models", headers=newer)
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    r = await env.client.post(f"/admin/v1/keys/{key_id}/rotate", headers=h)
    assert r.status_code == 409
    ids = [k["id"] for k in (await env.client.get("/admin/v1/keys", headers=h)).json()["data"]]
    assert key_id not in ids
    r = await env.client.get("/admin/v1/keys", params={"include_revoked": True}, headers=h)
    assert key_id in [k["id"] for k in r.json()["data"]]


async def test_key_validation(env):
    h = env.auth("admin")
    r = await env.client.post("/admin/v1/keys", headers=h, json={"name": "k", "role": "root"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "role"
    r = await env.client.post("/admin/v1/keys", headers=h,
                              json={"name": "k", "expires_in_s": 5, "expires_at": "2030-01-01T00:00:00Z"})
    assert r.status_code == 422 and "not both" in r.json()["error"]["message"]
    r = await env.client.post("/admin/v1/keys", headers=h, json={"name": "k", "secret": "short"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "secret"
    assert (await env.client.get("/admin/v1/keys/999", headers=h)).status_code == 404


async def test_team_crud(env):
    h = env.auth("admin")
    r = await env.client.post("/admin/v1/teams", headers=h, json={"name": "ml", "rpm_limit": 100})
    assert r.status_code == 201 and env.source.current.teams["ml"].rpm_limit == 100
    r = await env.client.patch("/admin/v1/teams/ml", headers={**h, "If-Match": '"1"'},
                               json={"tpm_limit": 5000, "max_budget": 12.5,
                                     "budget_period": "month"})
    assert r.status_code == 200 and r.json()["tpm_limit"] == 5000
    assert r.json()["budget_period"] == "month"
    team = env.source.current.teams["ml"]
    assert team.max_budget == 12.5 and team.budget_period == "month"
    r = await env.client.patch("/admin/v1/teams/ml", headers={**h, "If-Match": '"1"'},
                               json={"rpm_limit": 1})
    assert r.status_code == 409
    r = await env.client.patch("/admin/v1/teams/ml", headers=h, json={"budget_period": "year"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "budget_period"
    assert "hour" in r.json()["error"]["message"]
    assert (await env.client.post("/admin/v1/teams", headers=h, json={"name": "ml"})).status_code == 409
    assert (await env.client.delete("/admin/v1/teams/ml", headers=h)).status_code == 204
    assert (await env.client.get("/admin/v1/teams/ml", headers=h)).status_code == 404


async def test_key_and_team_views_report_the_current_period_spend(env):
    from datetime import datetime, timedelta, timezone

    from common.budget_periods import period_bounds
    from registry.access_queries import UsageRecord, record_usage

    h = env.auth("admin")
    await env.client.post("/admin/v1/teams", headers=h, json={
        "name": "ops", "max_budget": 100, "budget_period": "month"})
    r = await env.client.post("/admin/v1/keys", headers=h, json={
        "name": "daily", "team": "ops", "max_budget": 2.0, "budget_period": "day"})
    key_id = r.json()["id"]
    today, _ = period_bounds("day", datetime.now(timezone.utc))
    with env.sessions.begin() as s:
        record_usage(s, [UsageRecord(today + timedelta(minutes=5), key_id, "ops", "m", cost=0.5),
                         UsageRecord(today - timedelta(minutes=5), key_id, "ops", "m", cost=9.0)])
    budget = (await env.client.get(f"/admin/v1/keys/{key_id}", headers=h)).json()["budget"]
    assert budget["period"] == "day" and budget["spent_usd"] == 0.5  # yesterday's 9.0 is out
    assert budget["remaining_usd"] == 1.5
    assert budget["resets_at"] == (today + timedelta(days=1)).isoformat()
    team = (await env.client.get("/admin/v1/teams/ops", headers=h)).json()["budget"]
    month_start, _ = period_bounds("month", datetime.now(timezone.utc))
    expected = 0.5 + (9.0 if today - timedelta(minutes=5) >= month_start else 0.0)
    assert team["spent_usd"] == expected and team["max_usd"] == 100
    lifetime = (await env.client.post("/admin/v1/keys", headers=h, json={"name": "life"})).json()
    view = (await env.client.get(f"/admin/v1/keys/{lifetime['id']}", headers=h)).json()
    assert view["budget"] == {"max_usd": None, "period": None, "period_start": None,
                              "resets_at": None, "spent_usd": 0.0, "remaining_usd": None}
