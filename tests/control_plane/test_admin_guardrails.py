"""/admin/v1/guardrails: policies and bindings created, read, changed and deleted by admins
(operators read, users are refused), audited, and delivered to the gateway in the snapshot;
a request's stored bodies are for admins only."""
from __future__ import annotations

import time

from sqlalchemy import select

from common.usage_record import RequestBodies, UsageRecord
from control_plane.usage_sink import sql_usage_writer
from registry.orm.access import ApiKey
from registry.orm.audit import AuditLog

BASE = "/admin/v1/guardrails"
SPEC = {"pii": {"email": "mask", "card": "block"}, "banned_terms": ["falcon"],
        "body_log": "full"}


async def test_crud_audit_and_snapshot(env_any):
    env = env_any   # SQLite and PostgreSQL
    c, admin = env.client, env.auth("admin")
    r = await c.post(f"{BASE}/policies", json={"name": "strict", "spec": SPEC}, headers=admin)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["pii"] == {"email": "mask", "card": "block"}
    assert r.headers["etag"] == '"1"'
    dup = await c.post(f"{BASE}/policies", json={"name": "strict"}, headers=admin)
    assert dup.status_code == 409

    bound = await c.put(f"{BASE}/bindings", json={"policy": "strict", "model": "m1"},
                        headers=admin)
    assert bound.status_code == 200 and bound.json()["policy"] == "strict"
    with env.sessions() as s:
        user_key = s.scalar(select(ApiKey.id).where(ApiKey.name == "user-key"))
    assert (await c.put(f"{BASE}/bindings", json={"policy": "strict", "key_id": user_key},
                        headers=admin)).status_code == 200

    view = env.source.current.guardrails
    assert view.policy_for("m1", None).spec["banned_terms"] == ["falcon"]
    assert view.policy_for("other", user_key).name == "strict"
    assert view.policy_for("other", None) is None

    got = await c.get(f"{BASE}/policies/strict", headers=env.auth("operator"))
    assert got.json()["models"] == ["m1"] and got.json()["key_ids"] == [user_key]

    patched = await c.patch(f"{BASE}/policies/strict", json={"spec": {"pii": {"ip": "log"}}},
                            headers={**admin, "If-Match": '"1"'})
    assert patched.status_code == 200, patched.text
    assert patched.json()["spec"]["pii"] == {"ip": "log"}
    assert patched.json()["spec"]["body_log"] == "off"     # the whole spec was replaced
    assert env.source.current.guardrails.policies["strict"].revision == 2
    stale = await c.patch(f"{BASE}/policies/strict", json={"spec": {}},
                          headers={**admin, "If-Match": '"1"'})
    assert stale.status_code == 409

    bindings = (await c.get(f"{BASE}/bindings", headers=admin)).json()["data"]
    model_binding = next(b for b in bindings if b["model"] == "m1")
    assert (await c.delete(f"{BASE}/bindings/{model_binding['id']}",
                           headers=admin)).status_code == 204
    assert env.source.current.guardrails.policy_for("m1", None) is None

    assert (await c.delete(f"{BASE}/policies/strict", headers=admin)).status_code == 204
    assert (await c.get(f"{BASE}/policies/strict", headers=admin)).status_code == 404
    assert not env.source.current.guardrails
    with env.sessions() as s:
        actions = [(a.action, a.resource_type) for a in s.scalars(
            select(AuditLog).where(AuditLog.resource_type.like("guardrail%"))
            .order_by(AuditLog.id))]
    assert actions == [("create", "guardrail_policy"), ("bind", "guardrail_binding"),
                       ("bind", "guardrail_binding"), ("update", "guardrail_policy"),
                       ("unbind", "guardrail_binding"), ("delete", "guardrail_policy")]


async def test_authorization(env):
    c = env.client
    for role, read, write in (("user", 403, 403), ("operator", 200, 403),
                              ("admin", 200, 201)):
        h = env.auth(role)
        assert (await c.get(f"{BASE}/policies", headers=h)).status_code == read
        r = await c.post(f"{BASE}/policies", json={"name": f"p-{role}"}, headers=h)
        assert r.status_code == write
        if write == 403:
            assert r.json()["error"]["code"] == "forbidden"
        assert (await c.put(f"{BASE}/bindings", json={"policy": "p-admin", "model": "m"},
                            headers=h)).status_code == (200 if role == "admin" else 403)
    assert (await c.get(f"{BASE}/policies")).status_code == 401


async def test_bad_input_is_a_clear_4xx(env):
    c, admin = env.client, env.auth("admin")
    bad_spec = await c.post(f"{BASE}/policies", json={"name": "x", "spec": {
        "pii": {"emails": "mask"}}}, headers=admin)
    assert bad_spec.status_code in (400, 422) and "emails" in bad_spec.text
    bad_regex = await c.post(f"{BASE}/policies", json={"name": "x", "spec": {
        "regexes": [{"name": "r", "pattern": "(["}]}}, headers=admin)
    assert bad_regex.status_code in (400, 422) and "regular expression" in bad_regex.text
    assert (await c.post(f"{BASE}/policies", json={"name": "x y"},
                         headers=admin)).status_code in (400, 422)
    await c.post(f"{BASE}/policies", json={"name": "x"}, headers=admin)
    both = await c.put(f"{BASE}/bindings", json={"policy": "x", "model": "m", "key_id": 1},
                       headers=admin)
    assert both.status_code in (400, 422)
    assert (await c.put(f"{BASE}/bindings", json={"policy": "nope", "model": "m"},
                        headers=admin)).status_code == 404
    assert (await c.put(f"{BASE}/bindings", json={"policy": "x", "key_id": 999999},
                        headers=admin)).status_code == 422
    assert (await c.delete(f"{BASE}/bindings/12345", headers=admin)).status_code == 404


async def test_request_bodies_for_admins_only(env):
    writer = sql_usage_writer(env.sessions)
    writer.sink([UsageRecord(
        request_id="req-1", key_id="1", team=None, model="m", version=None, backend="b",
        prompt_tokens=1, completion_tokens=1, created_at=time.time(),
        bodies=RequestBodies(mode="full", policy="p", request_body='{"x": "[EMAIL]"}',
                             response_body="hi [EMAIL]", request_chars=16, response_chars=10,
                             findings=({"rule": "email", "action": "mask",
                                        "direction": "input", "count": 1},)))])
    url = "/admin/v1/requests/req-1/bodies"
    r = await env.client.get(url, headers=env.auth("admin"))
    assert r.status_code == 200
    row = r.json()["data"][0]
    assert row["response_body"] == "hi [EMAIL]" and row["findings"][0]["rule"] == "email"
    for role in ("operator", "user"):
        denied = await env.client.get(url, headers=env.auth(role))
        assert denied.status_code == 403 and "bodies" not in denied.text
    assert (await env.client.get("/admin/v1/requests/none/bodies",
                                 headers=env.auth("admin"))).status_code == 404


async def test_the_moderation_api_key_is_never_shown(env):
    c, admin = env.client, env.auth("admin")
    spec = {"moderation": {"url": "http://mod/v1/moderations", "api_key": "sk-mod-secret"}}
    created = await c.post(f"{BASE}/policies", json={"name": "m", "spec": spec}, headers=admin)
    assert created.json()["spec"]["moderation"]["api_key"] == "***"
    shown = (await c.get(f"{BASE}/policies/m", headers=env.auth("operator"))).json()
    assert shown["spec"]["moderation"]["api_key"] == "***"
    # the console sends the spec back as shown: the stored key stays
    shown["spec"]["moderation"]["timeout_s"] = 1.0
    assert (await c.patch(f"{BASE}/policies/m", json={"spec": shown["spec"]},
                          headers=admin)).status_code == 200
    assert env.source.current.guardrails.policies["m"].spec["moderation"]["api_key"] == \
        "sk-mod-secret"
    audit = (await c.get("/admin/v1/audit", params={"resource_type": "guardrail_policy"},
                         headers=env.auth("operator"))).text
    assert "sk-mod-secret" not in audit
