"""The on-demand sync endpoint on the real admin app: roles, a sync that refreshes the routing
snapshot, validation and an unreachable MLflow as clear errors."""

from __future__ import annotations

import httpx

from control_plane.mlflow_api import build_mlflow_router
from registry.mlflow_sync import MlflowSync
from tests.conftest import free_port
from tests.control_plane.conftest import build_admin_app


async def admin_client(url: str, tracking_uri: str, prefix: str = ""):
    app, sessions, source, keys = build_admin_app(url)
    app.include_router(build_mlflow_router(MlflowSync(sessions, tracking_uri, prefix=prefix),
                                           source))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin")
    return client, source, {role: {"Authorization": f"Bearer {k}"} for role, k in keys.items()}


async def test_operator_syncs_on_demand_and_the_snapshot_follows(tmp_path, client, mlflow_uri,
                                                                 prefix):
    client.create_registered_model(prefix + "phi")
    number = client.create_model_version(prefix + "phi", "hf://microsoft/phi-2",
                                         await_creation_for=0).version
    client.set_registered_model_alias(prefix + "phi", "champion", number)
    http, source, auth = await admin_client(f"sqlite:///{tmp_path / 'r.db'}", mlflow_uri, prefix)
    async with http:
        assert (await http.post("/admin/v1/mlflow/sync", headers=auth["user"])).status_code == 403
        bad = await http.post("/admin/v1/mlflow/sync", json={"direction": "up"},
                              headers=auth["operator"])
        assert bad.status_code in (400, 422)

        response = await http.post("/admin/v1/mlflow/sync", json={"direction": "pull"},
                                   headers=auth["operator"])
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["changed"] and body["snapshot_version"] == source.current.version
        assert "phi:champion" in source.current.aliases  # routable without waiting for a poll
        status = (await http.get("/admin/v1/mlflow/sync", headers=auth["operator"])).json()
        assert status["last_error"] is None and status["last_report"] == body


async def test_unreachable_mlflow_is_a_503(tmp_path):
    http, _, auth = await admin_client(f"sqlite:///{tmp_path / 'r.db'}",
                                       f"http://127.0.0.1:{free_port()}")
    async with http:
        response = await http.post("/admin/v1/mlflow/sync", headers=auth["admin"])
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "mlflow_unavailable"
        status = (await http.get("/admin/v1/mlflow/sync", headers=auth["admin"])).json()
        assert "not reachable" in status["last_error"]
