"""inferplane_backend_healthy from the health prober: one series per registered backend,
following real HTTP probes; cold backends have none; deleted backends lose theirs."""
from __future__ import annotations

import http.server
import threading

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import delete

from common.metric_names import Metric
from control_plane.health import HealthProber
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.orm.catalog import Backend
from tests.conftest import free_port
from tests.registry.databases import sqlite_url  # noqa: F401


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": []}')

    def log_message(self, *args):
        pass


@pytest.fixture
def live_backend():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def sessions(sqlite_url):
    upgrade(sqlite_url, progress=None)
    return make_session_factory(sqlite_url)


def series(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {(s.labels["model"], s.labels["backend"]): s.value
            for family in registry.collect() if family.name == Metric.BACKEND_HEALTHY
            for s in family.samples}


async def test_gauge_follows_probes_for_every_backend(sessions, live_backend):
    dead = f"http://127.0.0.1:{free_port()}/v1"   # nothing listens: connection refused
    with sessions.begin() as s:
        q.create_model(s, "m")
        up_id = q.add_backend(s, "m", live_backend, state="starting").id
        down_id = q.add_backend(s, "m", dead, state="ready").id
        q.add_backend(s, "m", "http://127.0.0.1:1/v1", tier="cold", state="down")
    changes = []
    prober = HealthProber(sessions, on_change=lambda: changes.append(1), failures_to_down=2)
    registry = CollectorRegistry()
    prober.export_to(registry)
    # Exported at once, from the registry's states, before the first probe.
    assert series(registry) == {("m", str(up_id)): 0.0, ("m", str(down_id)): 1.0}
    async with httpx.AsyncClient() as client:
        await prober.probe_once(client)
        assert series(registry) == {("m", str(up_id)): 1.0, ("m", str(down_id)): 1.0}
        await prober.probe_once(client)   # second miss: down
        assert series(registry) == {("m", str(up_id)): 1.0, ("m", str(down_id)): 0.0}
        assert changes
        with sessions.begin() as s:
            s.execute(delete(Backend).where(Backend.id == down_id))
        await prober.probe_once(client)
    assert series(registry) == {("m", str(up_id)): 1.0}
    assert b"inferplane_backend_healthy" in generate_latest(registry)


async def test_a_probe_changes_only_the_rows_it_probed(sessions, live_backend):
    """An unmanaged row registered at a managed engine's URL (another model, or the same model
    under another served name) is probed on its own: when its probes fail, the managed row the
    supervisor reports on keeps its state."""
    from control_plane.backend_allowlist import BackendAllowlist

    with sessions.begin() as s:
        for name in ("engine", "other"):
            q.create_model(s, name)
        managed_id = q.add_backend(s, "engine", live_backend, state="ready", managed=True).id
        other_id = q.add_backend(s, "other", live_backend, state="ready").id
        alias_id = q.add_backend(s, "engine", live_backend, served_model="alias",
                                 state="ready").id
    refusing = BackendAllowlist.from_networks(["10.0.0.0/8"])   # 127.0.0.1 is refused
    prober = HealthProber(sessions, on_change=lambda: None, failures_to_down=2,
                          allowlist=refusing)

    def states() -> dict[int, str]:
        with sessions() as s:
            return {b.id: b.state for b in s.query(Backend)}

    async with httpx.AsyncClient() as client:
        for _ in range(2):
            await prober.probe_once(client)
        assert states() == {managed_id: "ready", other_id: "down", alias_id: "down"}
        prober.allowlist = BackendAllowlist.from_networks(["127.0.0.1/32"])
        await prober.probe_once(client)   # the real GET /v1/models answers 200 again
    assert states() == {managed_id: "ready", other_id: "ready", alias_id: "ready"}
