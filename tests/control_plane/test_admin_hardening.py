"""Bounded inputs, database errors as precise 4xx, and stored data that never breaks a read."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from registry.orm.audit import AuditLog
from registry.orm.catalog import ModelVersion

OP = "operator"
BIG = 2**70


async def _model_with_version(env, name="m", version="v1"):
    h = env.auth(OP)
    assert (await env.client.post("/admin/v1/models", json={"name": name}, headers=h)).status_code == 201
    r = await env.client.post(f"/admin/v1/models/{name}/versions", json={"version": version},
                              headers=h)
    assert r.status_code == 201, r.text


async def _reads(env, name="m", version="v1") -> list[int]:
    h = env.auth("admin")
    paths = [f"/admin/v1/models/{name}/versions", f"/admin/v1/models/{name}/versions/{version}",
             "/admin/v1/audit", "/admin/v1/audit?resource_type=model_version"]
    return [(await env.client.get(p, headers=h)).status_code for p in paths]


async def test_engine_args_beyond_64_bits_are_refused_before_saving(gateway_env):
    env = gateway_env
    await _model_with_version(env)
    h = env.auth(OP)
    r = await env.client.post("/admin/v1/models/m/versions",
                              json={"version": "v2", "engine_args": {"max_model_len": BIG}}, headers=h)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["param"] == "engine_args" and "64-bit" in error["message"]
    r = await env.client.patch("/admin/v1/models/m/versions/v1",
                               json={"engine_args": {"x": [1, {"y": -BIG}]}}, headers=h)
    assert r.status_code == 422 and "engine_args.x[1].y" in r.json()["error"]["message"]
    # Nothing was saved: v2 does not exist, v1 is unchanged, every read path answers.
    assert (await env.client.get("/admin/v1/models/m/versions/v2", headers=h)).status_code == 404
    assert (await env.client.get("/admin/v1/models/m/versions/v1", headers=h)).json()["engine_args"] == {}
    assert await _reads(env) == [200, 200, 200, 200]


async def test_values_stored_before_the_check_do_not_break_reads(gateway_env):
    env = gateway_env
    await _model_with_version(env)
    with env.sessions.begin() as s:  # as an older release (or a hand edit) could have left it
        s.execute(update(ModelVersion).values(engine_args={"n": BIG, "ok": 1}))
        s.execute(update(AuditLog).values(after={"engine_args": {"n": BIG}}))
    assert await _reads(env) == [200, 200, 200, 200]
    got = (await env.client.get("/admin/v1/models/m/versions/v1", headers=env.auth(OP))).json()
    assert got["engine_args"] == {"n": str(BIG), "ok": 1}
    audit = (await env.client.get("/admin/v1/audit", headers=env.auth("admin"))).json()["data"]
    assert audit[0]["after"] == {"engine_args": {"n": str(BIG)}}


@pytest.mark.parametrize("method, path, body, param", [
    ("GET", f"/admin/v1/keys/{BIG}", None, "key_id"),
    ("GET", "/admin/v1/backends/0", None, "backend_id"),
    ("POST", f"/admin/v1/keys/{2**31}/revoke", None, "key_id"),
    ("GET", f"/admin/v1/rollouts/{BIG}", None, "rollout_id"),
    ("DELETE", f"/admin/v1/slos/{BIG}", None, "slo_id"),
    ("GET", f"/admin/v1/models?offset={BIG}", None, "offset"),
    ("GET", f"/admin/v1/audit?cursor={BIG}", None, "cursor"),
    ("GET", "/admin/v1/audit?actor=" + "x" * 301, None, "actor"),
    ("POST", "/admin/v1/keys", {"name": "k", "rpm_limit": BIG}, "rpm_limit"),
    ("POST", "/admin/v1/teams", {"name": "t", "tpm_limit": 2**31}, "tpm_limit"),
    ("POST", "/admin/v1/models", {"name": "m", "context_length": BIG}, "context_length"),
    ("POST", "/admin/v1/models", {"name": "m", "price_in_per_1k": 1e300}, "price_in_per_1k"),
    ("POST", "/admin/v1/slos", {"name": "s", "metric": "availability", "objective": 0.9,
                                "window_s": BIG}, "window_s"),
    ("PUT", "/admin/v1/models/m/aliases/prod", {"version": "v1", "expected_row_version": BIG},
     "expected_row_version"),
    ("PUT", "/admin/v1/models/m/aliases/" + "a" * 101, {"version": "v1"}, "alias"),
])
async def test_out_of_range_inputs_are_400_naming_the_field(env, method, path, body, param):
    r = await env.client.request(method, path, json=body, headers=env.auth("admin"))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


async def test_if_match_must_be_a_plain_number(env):
    await _model_with_version(env)
    for header in ("²", "9" * 11, "-1"):   # "²".isdigit() is True in Python
        r = await env.client.patch("/admin/v1/models/m", json={}, headers={
            **env.auth(OP), "If-Match": header.encode("latin-1")})
        assert r.status_code == 400 and r.json()["error"]["param"] == "If-Match", header


async def test_nan_and_infinity_are_refused(env):
    raw = b'{"name": "m", "price_in_per_1k": NaN}'
    r = await env.client.post("/admin/v1/models", content=raw, headers={
        **env.auth(OP), "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "price_in_per_1k"


async def test_database_refusals_are_precise_4xx(env_any):
    """What only the database refuses (a NUL byte on PostgreSQL, say) is a 400, not a 500."""
    env = env_any
    r = await env.client.post("/admin/v1/models", json={"name": "m", "description": "a\x00b"},
                              headers=env.auth(OP))
    if env.sessions.kw["bind"].dialect.name == "postgresql":
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_value" and "NUL" in r.json()["error"]["message"]
    else:
        assert r.status_code == 201, r.text
    r = await env.client.get("/admin/v1/models", headers=env.auth(OP))
    assert r.status_code == 200


async def test_the_admin_api_never_sets_an_engine_command(env):
    """A managed engine's command line comes from the configuration (an engine template and
    tiers.executables); a `command` sent to the admin API is refused, naming it."""
    h = env.auth(OP)
    assert (await env.client.post("/admin/v1/models", json={"name": "m"}, headers=h)).status_code == 201
    r = await env.client.post("/admin/v1/backends", headers=h, json={
        "model": "m", "url": "http://127.0.0.1:9/v1", "managed": True,
        "command": ["/bin/sh", "-c", "touch /tmp/owned"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "command", r.text
    r = await env.client.post("/admin/v1/backends", headers=h, json={
        "model": "m", "url": "http://127.0.0.1:9/v1"})
    assert r.status_code == 201 and r.json()["command"] is None
    r = await env.client.patch(f"/admin/v1/backends/{r.json()['id']}", headers=h,
                               json={"command": ["/bin/sh"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "command", r.text
