"""Every /admin and /v1 route × every kind of credential gives the documented status.

The routes come from the app itself (routers included at any depth) and each must appear in
/openapi.json with its x-required-role, so a new route cannot escape the matrix. The app is
the one `inferplane up` serves (gateway + admin + tiers), on a migrated SQLite registry.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from prometheus_client import CollectorRegistry

from common.auth.principal import ROLE_RANK
from common.openapi_doc import api_routes
from control_plane.admin import include_admin_routers
from control_plane.slo import SloTracker
from control_plane.snapshots import SnapshotSource
from control_plane.supervisor import EngineSupervisor
from control_plane.tiers import TierConfig, TierManager, build_tiers_router
from gateway.app import create_gateway_app
from gateway.settings import GatewaySettings
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade

CREDENTIALS = ("none", "malformed", "revoked", "expired", "user", "operator", "admin",
               "restricted")
# Path parameters name nothing that exists: a request that passes authorization ends in a
# 4xx of its own (404, 400), and no credential of the matrix is revoked or rotated by it.
PATH_VALUES = {"key_id": "999999", "backend_id": "999999", "rollout_id": "999999",
               "slo_id": "999999"}
MISSING_NAME = "zz-missing"


@pytest.fixture(scope="module")
def matrix_app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('matrix') / 'registry.db'}"
    upgrade(url, progress=None)
    sessions = make_session_factory(url)
    secrets = {}
    with sessions.begin() as s:
        for role in ("user", "operator", "admin"):
            _, secrets[role] = q.create_key(s, f"{role}-key", role=role)
        _, secrets["restricted"] = q.create_key(s, "restricted", models=["other"])
        revoked, secrets["revoked"] = q.create_key(s, "revoked", role="admin")
        q.revoke_key(s, revoked.id)
        _, secrets["expired"] = q.create_key(
            s, "expired", role="admin", expires_at=datetime.now(timezone.utc) - timedelta(1))
        model = q.create_model(s, "m")
        q.add_version(s, model, "v1")
        q.bump_snapshot_version(s)
    source = SnapshotSource(sessions)
    source.refresh()
    app = create_gateway_app(GatewaySettings.model_validate(
        {"routing": {"load_poll_interval_s": 0}}), source, sessions=sessions)
    include_admin_routers(app, sessions, source, SloTracker(sessions, registry=CollectorRegistry()))
    tiers = TierManager(sessions, EngineSupervisor(), lambda: None, TierConfig())
    app.include_router(build_tiers_router(tiers))
    yield app, secrets
    sessions.kw["bind"].dispose()


def headers_for(credential: str, secrets: dict[str, str]) -> dict[str, str]:
    if credential == "none":
        return {}
    if credential == "malformed":
        return {"Authorization": "Basic YWRtaW46YWRtaW4="}
    return {"Authorization": f"Bearer {secrets[credential]}"}


def expected(role: str | None, credential: str, path: str) -> set[int] | str:
    """The statuses the credential may get on a route needing `role` (None: open)."""
    if role is None:
        return "authorized"
    if credential in ("none", "malformed", "revoked", "expired"):
        return {401}
    held = {"restricted": "user"}.get(credential, credential)
    if ROLE_RANK[held] < ROLE_RANK[role]:
        return {403}
    if credential == "restricted" and path.startswith("/v1/") and path != "/v1/models" \
            and not path.startswith(("/v1/files", "/v1/batches")):   # not about a model
        return {404}   # model "m" is outside its allowlist: indistinguishable from missing
    return "authorized"


def _path(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m.group(1), MISSING_NAME), template)


def _body(path: str) -> dict | None:
    if path.startswith("/v1/chat"):
        return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    if path.startswith("/v1/completions"):
        return {"model": "m", "prompt": "hi", "max_tokens": 1}
    if path.startswith("/v1/embeddings"):
        return {"model": "m", "input": "hi"}
    if path.startswith("/v1/responses") and "{" not in path:
        return {"model": "m", "input": "hi", "max_output_tokens": 1}
    if path.startswith("/v1/messages"):
        return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    return None


def _operations(app) -> list[tuple[str, str]]:
    return sorted((route.path_format, method) for route in api_routes(app)
                  for method in route.methods
                  if route.path_format.startswith(("/admin/", "/v1/")))


def test_every_route_is_documented_with_its_role(matrix_app):
    app, _ = matrix_app
    doc = app.openapi()
    operations = _operations(app)
    assert len(operations) > 40 and ("/v1/chat/completions", "POST") in operations
    for path, method in operations:
        operation = doc["paths"][path][method.lower()]
        assert operation.get("x-required-role") in ROLE_RANK, (method, path)
        assert {"401", "403"} <= set(operation["responses"]), (method, path)


async def test_authorization_matrix(matrix_app):
    app, secrets = matrix_app
    doc = app.openapi()
    wrong = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://matrix") as client:
        for path, method in _operations(app):
            operation = doc["paths"][path][method.lower()]
            documented = {int(s) for s in operation["responses"]}
            role = operation.get("x-required-role")
            for credential in CREDENTIALS:
                r = await client.request(method, _path(path), json=_body(path),
                                         headers=headers_for(credential, secrets))
                want = expected(role, credential, path)
                # authorized: past the credential checks, into the route's own answers (a 503
                # on /v1 here: model "m" has no backend)
                ok = (r.status_code in want) if isinstance(want, set) else \
                    r.status_code not in (401, 403, 500)
                if not ok or r.status_code not in documented:
                    wrong.append(f"{method} {path} as {credential}: {r.status_code} "
                                 f"(want {want}, documented {sorted(documented)}) {r.text[:120]}")
    assert not wrong, "\n".join(wrong)


async def test_the_restricted_keys_refusal_names_only_what_it_asked_for(matrix_app):
    app, secrets = matrix_app
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://matrix") as client:
        r = await client.post("/v1/chat/completions", json=_body("/v1/chat"),
                              headers=headers_for("restricted", secrets))
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert "other" not in r.text
        listed = await client.get("/v1/models", headers=headers_for("restricted", secrets))
        assert listed.status_code == 200 and listed.json()["data"] == []
