"""Rollouts through the admin API: splits in the snapshot, state machine, promotion."""

from __future__ import annotations

from registry.snapshot import SplitView


async def setup_model(env):
    h = env.auth("operator")
    assert (await env.client.post("/admin/v1/models", json={"name": "chat"}, headers=h)).status_code == 201
    for label in ("v1", "v2"):
        r = await env.client.post("/admin/v1/models/chat/versions", json={"version": label}, headers=h)
        assert r.status_code == 201
    r = await env.client.put("/admin/v1/models/chat/aliases/default", json={"version": "v1"}, headers=h)
    assert r.status_code == 201
    return h


async def test_canary_rollout_steps_and_promotes(env):
    h = await setup_model(env)
    r = await env.client.post("/admin/v1/models/chat/rollouts", headers=h,
                              json={"to_version": "v2", "steps": [0.1, 0.5], "start": True})
    assert r.status_code == 201, r.text
    rollout = r.json()
    assert (rollout["state"], rollout["weight"], rollout["from_version"]) == ("running", 0.1, "v1")
    assert env.source.current.models["chat"].splits == (SplitView("v1", 0.9), SplitView("v2", 0.1))

    r = await env.client.post("/admin/v1/models/chat/rollouts", headers=h, json={"to_version": "v2"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "rollout_active"

    base = f"/admin/v1/models/chat/rollouts/{rollout['id']}"
    r = await env.client.post(f"{base}/advance", headers=h,
                              json={"measurements": {"error_rate": 0.001}})
    assert r.json()["weight"] == 0.5
    assert env.source.current.models["chat"].splits == (SplitView("v1", 0.5), SplitView("v2", 0.5))
    r = await env.client.post(f"{base}/resume", headers=h)
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_transition"
    r = await env.client.post(f"{base}/advance", headers=h)  # past the last step: promote
    assert r.json()["state"] == "promoted"
    chat = env.source.current.models["chat"]
    assert chat.splits == (SplitView("v2", 1.0),) and chat.aliases["default"] == "v2"

    r = await env.client.get(base, headers=h)
    assert [e["kind"] for e in r.json()["events"]] == ["created", "start", "advance", "promote"]
    assert r.json()["measurements"] == {"error_rate": 0.001}
    r = await env.client.post(f"{base}/explode", headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "action"


async def test_shadow_rollout_and_rollback(env):
    h = await setup_model(env)
    r = await env.client.post("/admin/v1/models/chat/rollouts", headers=h,
                              json={"to_version": "v2", "mode": "shadow", "steps": [0.2]})
    rollout_id = r.json()["id"]
    assert env.source.current.models["chat"].splits == (SplitView("v1", 1.0),)  # pending
    await env.client.post(f"/admin/v1/models/chat/rollouts/{rollout_id}/start", headers=h)
    assert env.source.current.models["chat"].splits == (
        SplitView("v1", 1.0), SplitView("v2", 0.2, shadow=True))
    r = await env.client.post(f"/admin/v1/models/chat/rollouts/{rollout_id}/rollback", headers=h)
    assert r.json()["state"] == "rolled_back"
    assert env.source.current.models["chat"].splits == (SplitView("v1", 1.0),)


async def test_rollout_validation(env):
    h = await setup_model(env)
    for body, param in (({"to_version": "v2", "steps": [0.5, 0.2]}, "steps"),
                        ({"to_version": "v2", "steps": [1.5]}, "steps"),
                        ({"to_version": "v2", "mode": "yolo"}, "mode")):
        r = await env.client.post("/admin/v1/models/chat/rollouts", headers=h, json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    r = await env.client.post("/admin/v1/models/chat/rollouts", headers=h, json={"to_version": "v1"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "to_version"
    r = await env.client.post("/admin/v1/models/chat/rollouts", headers=env.auth("user"),
                              json={"to_version": "v2"})
    assert r.status_code == 403
