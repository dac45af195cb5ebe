"""Optimistic concurrency under real concurrency, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio


async def test_concurrent_alias_updates_one_wins_one_conflicts(env_any):
    env = env_any
    h = env.auth("operator")
    assert (await env.client.post("/admin/v1/models", json={"name": "chat"}, headers=h)).status_code == 201
    for label in ("v1", "v2", "v3"):
        r = await env.client.post("/admin/v1/models/chat/versions", json={"version": label},
                                  headers=h)
        assert r.status_code == 201
    r = await env.client.put("/admin/v1/models/chat/aliases/prod", json={"version": "v1"}, headers=h)
    etag = r.headers["etag"]

    # Both writers read row_version 1 and try to move the alias; the routes run in parallel
    # worker threads, each in its own transaction.
    results = await asyncio.gather(*(
        env.client.put("/admin/v1/models/chat/aliases/prod", json={"version": label},
                       headers={**h, "If-Match": etag})
        for label in ("v2", "v3")))
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 409], [r.text for r in results]
    winner = next(r for r in results if r.status_code == 200).json()["version"]
    loser = next(r for r in results if r.status_code == 409).json()["error"]
    assert loser["type"] == "conflict_error" and loser["code"] == "row_version_mismatch"

    r = await env.client.get("/admin/v1/models/chat/aliases/prod", headers=h)
    assert (r.json()["version"], r.json()["row_version"]) == (winner, 2)
    assert env.source.current.models["chat"].aliases["prod"] == winner
    r = await env.client.get("/admin/v1/models/chat/aliases/prod/history", headers=h)
    assert len(r.json()["data"]) == 2  # the losing write left no history


async def test_concurrent_creates_of_one_name_conflict(env_any):
    env = env_any
    h = env.auth("operator")
    results = await asyncio.gather(*(
        env.client.post("/admin/v1/models", json={"name": "same"}, headers=h) for _ in range(3)))
    assert sorted(r.status_code for r in results) == [201, 409, 409], [r.text for r in results]
