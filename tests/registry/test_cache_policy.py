"""A model's cache policy: validated by the admin API and the YAML, carried by the snapshot,
and off unless asked for."""
from __future__ import annotations

import httpx
import pytest

from control_plane.settings import SettingsError, load_settings
from registry.cache_policy import CachePolicy, policy_of
from registry.snapshot import build_snapshot
from tests.control_plane.conftest import build_admin_app


def test_a_policy_is_only_what_switches_something_on():
    assert policy_of(None) is None and policy_of({}) is None
    assert policy_of({"exact": False}) is None
    assert policy_of({"semantic": True, "threshold": 0.8}).threshold == 0.8
    assert policy_of({"exact": True, "bogus": 1}) is None   # unreadable: uncached, not fatal


async def test_the_policy_goes_from_the_admin_api_into_the_snapshot(tmp_path):
    app, sessions, _, keys = build_admin_app(f"sqlite:///{tmp_path / 't.db'}")
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        made = await client.post("/admin/v1/models", headers=admin, json={
            "name": "c", "cache": {"semantic": True, "ttl_s": 60}})
        assert made.status_code == 201 and made.json()["cache"]["ttl_s"] == 60, made.text
        for bad in ({"threshold": 1.5}, {"ttl_s": 0}, {"unknown": True}):
            refused = await client.post("/admin/v1/models", headers=admin,
                                        json={"name": "x", "cache": bad})
            assert refused.status_code == 400, refused.text
        await client.post("/admin/v1/models", headers=admin, json={"name": "plain"})
        got = await client.get("/admin/v1/models/plain", headers=admin)
        patched = await client.patch("/admin/v1/models/plain", headers={
            **admin, "If-Match": got.headers["etag"]}, json={"cache": {"exact": True}})
        assert patched.status_code == 200, patched.text
    with sessions() as session:
        snapshot = build_snapshot(session)
    assert snapshot.models["c"].cache == CachePolicy(semantic=True, ttl_s=60)
    assert snapshot.models["plain"].cache == CachePolicy()


def test_the_yaml_refuses_an_unknown_cache_key(tmp_path):
    path = tmp_path / "inferplane.yaml"
    path.write_text("models:\n  - name: m\n    cache: {exact: true, ttl: 5}\n")
    with pytest.raises(SettingsError, match="cache.ttl"):
        load_settings(path)
    path.write_text("gateway:\n  cache: {tenant: key, max_entries: 5}\n")
    assert load_settings(path).gateway.cache.tenant == "key"
