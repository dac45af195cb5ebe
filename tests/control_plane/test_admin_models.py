"""CRUD for models, versions, aliases, backends and adapters; validation; audit; snapshot."""

from __future__ import annotations

import pytest

OP = "operator"


async def create_model(env, name="chat", **extra):
    r = await env.client.post("/admin/v1/models", json={"name": name, **extra}, headers=env.auth(OP))
    assert r.status_code == 201, r.text
    return r.json()


async def test_model_crud_bumps_the_snapshot_and_is_audited(env):
    v0 = env.source.current.version
    body = await create_model(env, "chat", context_length=8192, tier="warm", price_in_per_1k=0.5)
    assert (body["name"], body["tier"], body["row_version"]) == ("chat", "warm", 1)
    # The change is visible to the gateway right away, no poll needed.
    assert env.source.current.version == v0 + 1
    assert env.source.current.models["chat"].tier == "warm"

    r = await env.client.get("/admin/v1/models/chat", headers=env.auth(OP))
    assert r.status_code == 200 and r.headers["etag"] == '"1"'
    r = await env.client.patch("/admin/v1/models/chat", json={"tier": "hot"},
                               headers={**env.auth(OP), "If-Match": '"1"'})
    assert r.status_code == 200 and r.json()["row_version"] == 2 and r.headers["etag"] == '"2"'
    r = await env.client.patch("/admin/v1/models/chat", json={"tier": "cold"},
                               headers={**env.auth(OP), "If-Match": '"1"'})
    assert r.status_code == 409 and r.json()["error"]["code"] == "row_version_mismatch"
    assert env.source.current.models["chat"].tier == "hot"

    r = await env.client.get("/admin/v1/audit", params={"resource_type": "model"},
                             headers=env.auth(OP))
    entries = r.json()["data"]
    assert [e["action"] for e in entries] == ["update", "create"]
    update = entries[0]
    assert "operator-key" in update["actor"] and update["resource_id"] == "chat"
    assert (update["before"]["tier"], update["after"]["tier"]) == ("warm", "hot")

    r = await env.client.delete("/admin/v1/models/chat", headers=env.auth(OP))
    assert r.status_code == 204
    assert "chat" not in env.source.current.models
    r = await env.client.get("/admin/v1/models/chat", headers=env.auth(OP))
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "model 'chat' does not exist",
                                 "type": "not_found_error", "param": "model", "code": "not_found"}}


@pytest.mark.parametrize("body, param", [
    ({"name": "bad/name"}, "name"),
    ({"name": "ok", "tier": "lukewarm"}, "tier"),
    ({"name": "ok", "context_length": 0}, "context_length"),
    ({"name": "ok", "colour": "red"}, "colour"),
    ({"name": "ok", "routing": "fastest"}, "routing"),
    ({}, "name"),
])
async def test_invalid_model_bodies_are_400_naming_the_field(env, body, param):
    r = await env.client.post("/admin/v1/models", json=body, headers=env.auth(OP))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"]


async def test_unknown_fallback_is_404_and_self_fallback_422(env):
    r = await env.client.post("/admin/v1/models", json={"name": "ok", "fallbacks": ["missing"]},
                              headers=env.auth(OP))
    assert r.status_code == 404 and r.json()["error"]["param"] == "fallbacks"
    r = await env.client.post("/admin/v1/models", json={"name": "ok", "fallbacks": ["ok"]},
                              headers=env.auth(OP))
    assert r.status_code == 422 and "itself" in r.json()["error"]["message"]


async def test_duplicates_conflict_and_patch_rejects_null(env):
    await create_model(env, "chat")
    r = await env.client.post("/admin/v1/models", json={"name": "chat"}, headers=env.auth(OP))
    assert r.status_code == 409 and r.json()["error"]["code"] == "already_exists"
    r = await env.client.patch("/admin/v1/models/chat", json={"tier": None}, headers=env.auth(OP))
    assert r.status_code == 400 and r.json()["error"]["param"] == "tier"
    r = await env.client.patch("/admin/v1/models/chat", json={},
                               headers={**env.auth(OP), "If-Match": "yesterday"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "If-Match"


async def test_pagination(env):
    for i in range(5):
        await create_model(env, f"m{i}")
    r = await env.client.get("/admin/v1/models", params={"limit": 2, "offset": 2},
                             headers=env.auth(OP))
    page = r.json()
    assert [m["name"] for m in page["data"]] == ["m2", "m3"]
    assert (page["total"], page["has_more"]) == (5, True)
    r = await env.client.get("/admin/v1/models", params={"limit": 0}, headers=env.auth(OP))
    assert r.status_code == 400 and r.json()["error"]["param"] == "limit"


async def test_versions_aliases_backends_adapters(env):
    await create_model(env, "chat")
    h = env.auth(OP)
    for label in ("v1", "v2"):
        r = await env.client.post("/admin/v1/models/chat/versions",
                                  json={"version": label, "source_uri": f"hf://chat/{label}"},
                                  headers=h)
        assert r.status_code == 201, r.text
    r = await env.client.post("/admin/v1/models/chat/versions",
                              json={"version": "lora1", "kind": "lora"}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["param"] == "base_version"

    r = await env.client.put("/admin/v1/models/chat/aliases/default", json={"version": "v1"},
                             headers=h)
    assert r.status_code == 201 and r.json()["version"] == "v1"
    r = await env.client.put("/admin/v1/models/chat/aliases/default", json={"version": "v2"},
                             headers={**h, "If-Match": r.headers["etag"]})
    assert r.status_code == 200 and r.json()["row_version"] == 2
    r = await env.client.put("/admin/v1/models/chat/aliases/default", json={"version": "v9"},
                             headers=h)
    assert r.status_code == 404 and r.json()["error"]["param"] == "version"
    r = await env.client.get("/admin/v1/models/chat/aliases/default/history", headers=h)
    assert [(e["old_version"], e["new_version"]) for e in r.json()["data"]] == [
        ("v1", "v2"), (None, "v1")]

    r = await env.client.post("/admin/v1/backends", headers=h, json={
        "model": "chat", "version": "v2", "url": "http://127.0.0.1:8101/v1", "gpu_type": "H200",
        "weight": 2, "state": "ready"})
    assert r.status_code == 201, r.text
    backend_id = r.json()["id"]
    r = await env.client.post("/admin/v1/backends", headers=h, json={
        "model": "chat", "url": "not a url"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "url"

    r = await env.client.post("/admin/v1/models/chat/adapters", headers=h,
                              json={"name": "sql", "base_version": "v2", "rank": 16})
    assert r.status_code == 201, r.text
    r = await env.client.put(f"/admin/v1/models/chat/adapters/sql/backends/{backend_id}", headers=h)
    assert r.json()["attached"] is True

    snap = env.source.current
    chat = snap.models["chat"]
    assert chat.splits[0].version == "v2" and snap.resolve("chat:default") == (chat, "v2")
    (backend,) = chat.backends
    assert (backend.url, backend.gpu, backend.weight, backend.adapters, backend.version) == (
        "http://127.0.0.1:8101/v1", "H200", 2.0, ("sql",), "v2")

    r = await env.client.patch(f"/admin/v1/backends/{backend_id}", json={"state": "draining"},
                               headers=h)
    assert r.status_code == 200 and env.source.current.models["chat"].backends[0].state == "draining"
    r = await env.client.get("/admin/v1/backends", params={"model": "chat", "state": "draining"},
                             headers=h)
    assert [b["id"] for b in r.json()["data"]] == [backend_id]
    r = await env.client.delete(f"/admin/v1/backends/{backend_id}", headers=h)
    assert r.status_code == 204 and env.source.current.models["chat"].backends == ()


async def test_mounted_on_the_gateway_app(env):
    """The deployment shape: admin routers on the gateway's own app, sharing its auth."""
    import httpx

    from control_plane.admin import include_admin_routers
    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings

    app = create_gateway_app(GatewaySettings(), env.source)
    include_admin_routers(app, env.sessions, env.source)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gw") as client:
        r = await client.post("/admin/v1/models", json={"name": "gw", "routing": "p2c"},
                              headers=env.auth(OP))
        assert r.status_code == 201, r.text
        assert env.source.current.models["gw"].routing == "p2c"
        r = await client.post("/admin/v1/models", json={"name": "gw", "tier": 1},
                              headers=env.auth(OP))
        assert r.status_code == 400 and r.json()["error"]["param"] == "tier"
        assert (await client.get("/admin/v1/models")).status_code == 401
