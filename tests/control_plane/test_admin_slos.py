"""SLO objectives through the admin API: validation, RBAC, audit, and the error budget view."""
from __future__ import annotations

OP = "operator"


async def test_slo_crud_validation_and_audit(env):
    r = await env.client.post("/admin/v1/models", json={"name": "chat"}, headers=env.auth(OP))
    assert r.status_code == 201
    ok = {"name": "ttft-p95", "model": "chat", "metric": "ttft", "objective": 0.95,
          "threshold_ms": 500, "window_s": 3600}
    r = await env.client.post("/admin/v1/slos", json=ok, headers=env.auth(OP))
    assert r.status_code == 201, r.text
    slo_id = r.json()["id"]

    no_threshold = {**ok, "name": "x"}
    no_threshold.pop("threshold_ms")
    r = await env.client.post("/admin/v1/slos", json=no_threshold, headers=env.auth(OP))
    assert r.status_code == 422 and "threshold_ms" in r.json()["error"]["message"]
    r = await env.client.post("/admin/v1/slos", json={**ok, "objective": 1.5}, headers=env.auth(OP))
    assert r.status_code == 400 and r.json()["error"]["param"]
    r = await env.client.post("/admin/v1/slos", json={**ok, "model": "nope"}, headers=env.auth(OP))
    assert r.status_code == 404
    r = await env.client.post("/admin/v1/slos", json=ok, headers=env.auth("user"))
    assert r.status_code == 403

    listed = (await env.client.get("/admin/v1/slos?model=chat", headers=env.auth(OP))).json()
    assert [s["name"] for s in listed["data"]] == ["ttft-p95"]
    audit = (await env.client.get("/admin/v1/audit", headers=env.auth("admin"))).json()["data"]
    assert any(e["resource_type"] == "slo" and e["action"] == "create" for e in audit)

    r = await env.client.delete(f"/admin/v1/slos/{slo_id}", headers=env.auth(OP))
    assert r.status_code == 204
    r = await env.client.delete(f"/admin/v1/slos/{slo_id}", headers=env.auth(OP))
    assert r.status_code == 404


async def test_error_budget_without_tracker_is_a_clear_503(env):
    await env.client.post("/admin/v1/models", json={"name": "chat"}, headers=env.auth(OP))
    r = await env.client.get("/admin/v1/models/chat/error-budget", headers=env.auth(OP))
    assert r.status_code == 503 and r.json()["error"]["code"] == "slo_unavailable"
