"""A model's task (chat or embedding) travels from the admin API through the snapshot to
/v1/models, and the gateway refuses to chat with an embedding model before any engine is
called (real gateway, fake engines)."""
from __future__ import annotations

from dataclasses import replace

import httpx

from registry.snapshot import build_snapshot
from tests.control_plane.conftest import build_admin_app
from tests.gateway.conftest import backend, chat_body, model


def test_an_embedding_model_does_not_chat_and_is_listed_as_such(engines, make_gateway):
    embedder = replace(model("embedder", [backend(engines[0])]), task="embedding")
    gw = make_gateway([embedder, model("m", [backend(engines[1])])])
    with gw.client() as client:
        for path, body in (("/v1/chat/completions", chat_body(model="embedder")),
                           ("/v1/completions", {"model": "embedder", "prompt": "hi"})):
            resp = client.post(path, json=body)
            assert resp.status_code == 400, resp.text
            error = resp.json()["error"]
            assert error["code"] == "not_a_chat_model" and error["param"] == "model"
            assert "/v1/embeddings" in error["message"]
        assert engines[0].stats()["requests"] == 0   # refused before any backend was called
        ok = client.post("/v1/embeddings", json={"model": "embedder", "input": "hi"})
        assert ok.status_code == 200, ok.text
        listed = {m["id"]: m["inferplane_task"] for m in client.get("/v1/models").json()["data"]}
        assert listed == {"embedder": "embedding", "m": "chat"}


async def test_the_task_goes_from_the_admin_api_into_the_snapshot(tmp_path):
    app, sessions, _, keys = build_admin_app(f"sqlite:///{tmp_path / 't.db'}")
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        made = await client.post("/admin/v1/models", headers=admin,
                                 json={"name": "minilm", "task": "embedding"})
        assert made.status_code == 201 and made.json()["task"] == "embedding", made.text
        bad = await client.post("/admin/v1/models", headers=admin,
                                json={"name": "x", "task": "rerank"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "task", bad.text
        plain = await client.post("/admin/v1/models", headers=admin, json={"name": "plain"})
        assert plain.json()["task"] == "chat"
    with sessions() as session:
        snapshot = build_snapshot(session)
    assert snapshot.models["minilm"].task == "embedding"
    assert snapshot.models["plain"].task == "chat"
