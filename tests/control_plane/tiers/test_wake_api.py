"""The split-deployment path: a gateway's HttpColdStarter POSTs /admin/v1/models/{name}/wake
to the control plane's tiers router (real admin auth, real registry, a real engine start) and
waits until its snapshot shows the backend ready."""
from __future__ import annotations

import asyncio

import httpx

from control_plane.supervisor import EngineSupervisor
from control_plane.tiers import EngineTemplate, TierConfig, TierManager, build_tiers_router
from gateway.traffic.coldstart import HttpColdStarter
from tests.conftest import free_port
from tests.control_plane.conftest import build_admin_app
from tests.control_plane.tiers.conftest import SIM_ARGS, SIM_MODEL, add_model


async def test_wake_over_http(sqlite_url):
    app, sessions, source, keys = build_admin_app(sqlite_url)
    add_model(sessions, "lazy", "cold")
    add_model(sessions, "external", "cold")
    source.refresh()
    supervisor = EngineSupervisor()
    tiers = TierManager(sessions, supervisor, source.refresh, TierConfig(
        engines={"lazy": EngineTemplate(SIM_MODEL, args=dict(SIM_ARGS))}, start_timeout_s=90,
        port_base=free_port()))
    app.include_router(build_tiers_router(tiers))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp")
    op = {"Authorization": f"Bearer {keys['operator']}"}
    try:
        assert (await client.post("/admin/v1/models/lazy/wake")).status_code == 401
        user = {"Authorization": f"Bearer {keys['user']}"}
        assert (await client.post("/admin/v1/models/lazy/wake", headers=user)).status_code == 403
        missing = await client.post("/admin/v1/models/nope/wake", headers=op)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        fixed = await client.post("/admin/v1/models/external/wake", headers=op)
        assert fixed.status_code == 409 and fixed.json()["error"]["code"] == "not_startable"
        bad = await client.post("/admin/v1/models/lazy/wake", headers=op, json={"wait_s": -1})
        assert bad.status_code == 400

        starter = HttpColdStarter("http://cp", keys["operator"], source, client=client)
        assert await starter.ensure_backend("lazy", 90.0)
        assert [b.state for b in source.current.models["lazy"].backends] == ["ready"]
        again = await client.post("/admin/v1/models/lazy/wake", headers=op, json={"wait_s": 5})
        assert again.status_code == 200 and again.json()["state"] == "ready"
        assert len(supervisor.processes) == 1

        for _ in range(3):
            starter.note_request("lazy")
        await starter.flush()
        status = (await client.get("/admin/v1/tiers", headers=op)).json()["data"]
        lazy = next(m for m in status if m["model"] == "lazy")
        assert lazy["rate_rps"] == round(3 / tiers.config.rate_window_s, 4)
        assert len(lazy["engines"]) == 1 and lazy["engines"][0]["running"]
    finally:
        await client.aclose()
        await tiers.shutdown()
        await supervisor.stop_all()
        await asyncio.sleep(0)
        sessions.kw["bind"].dispose()
