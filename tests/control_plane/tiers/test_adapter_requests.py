"""A request for "<model>:<adapter>" that no running engine holds: the gateway has the control
plane load it (AdapterManager: a free slot, else the least recently used adapter past its
minimum residency) and routes to that engine. In process (`inferplane up`) and over the admin
wake API (a gateway apart); a real simulated engine with runtime LoRA, real registry."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from common.errors import install_error_handlers
from control_plane.snapshots import SnapshotSource
from control_plane.supervisor import EngineSupervisor
from control_plane.tiers import TierConfig, TierManager, build_tiers_router
from control_plane.tiers.cold_starter import InProcessColdStarter
from gateway.app import create_gateway_app
from gateway.settings import GatewaySettings
from gateway.traffic.coldstart import HttpColdStarter
from registry import queries as q
from tests.control_plane.tiers.conftest import make_peft_dir, running_adapter_engine
from tests.control_plane.tiers.test_warm_adapters import _engine_has

RESIDENCY_S = 4.0
BUDGET_S = 2.0  # shorter than the residency: a full slot is refused, not waited for


@pytest.fixture
def registry(sessions, adapter_engine, tmp_path):
    """Model "base" (warm, LoRA-affinity routing) on the running engine, adapters a1 and a2
    (and a3)
    declared; user/operator keys. Returns (sessions, {role: key})."""
    keys = {}
    with sessions.begin() as s:
        model = q.create_model(s, "base", tier="warm", routing="lora_affinity")
        q.add_backend(s, "base", adapter_engine, engine="builtin", state="ready", tier="warm")
        for name in ("a1", "a2", "a3"):
            q.add_adapter(s, model, name, source_uri=str(make_peft_dir(tmp_path, name)), rank=4)
        for role in ("user", "operator"):
            _, keys[role] = q.create_key(s, f"{role}-key", role=role)
        q.bump_snapshot_version(s)
    return sessions, keys


def _gateway(source, starter):
    settings = GatewaySettings.model_validate({"routing": {"load_poll_interval_s": 0},
                                               "admission": {"cold_start_budget_s": BUDGET_S}})
    return create_gateway_app(settings, source, cold_starter=starter)


def _control_plane(tiers, source) -> FastAPI:
    """The control plane's tier routes alone (admin auth reads keys from `source`)."""
    app = FastAPI()
    app.state.gateway = SimpleNamespace(snapshot_source=source, jwt=None, settings=None)
    install_error_handlers(app)
    app.include_router(build_tiers_router(tiers))
    return app


def _client(app, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw",
                             headers={"authorization": f"Bearer {key}"}, timeout=30)


async def _chat(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/v1/chat/completions", json={
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})


async def test_adapter_loaded_on_demand_in_process(registry, adapter_engine, snapshots):
    sessions, keys = registry
    tiers = TierManager(sessions, EngineSupervisor(), snapshots.refresh,
                        TierConfig(max_loras=1, min_residency_s=RESIDENCY_S))
    app = _gateway(snapshots, InProcessColdStarter(tiers, snapshots))
    try:
        async with _client(app, keys["user"]) as client:
            plain = await _chat(client, "base")  # no adapter: nothing is loaded
            assert plain.status_code == 200 and _engine_has(adapter_engine) == []

            first = await _chat(client, "base:a1")
            assert first.status_code == 200, first.text
            assert _engine_has(adapter_engine) == ["a1"]
            assert snapshots.current.models["base"].backends[0].adapters == ("a1",)

            # The one slot holds a1, loaded less than the residency ago: a2 may not evict it.
            busy = await _chat(client, "base:a2")
            assert busy.status_code == 503, busy.text
            assert busy.json()["error"]["code"] == "adapter_slots_busy"
            assert 1 <= int(busy.headers["retry-after"]) <= RESIDENCY_S
            assert _engine_has(adapter_engine) == ["a1"]

            await asyncio.sleep(RESIDENCY_S)  # a1 is now past its residency: a2 takes its slot
            second = await _chat(client, "base:a2")
            assert second.status_code == 200, second.text
            assert _engine_has(adapter_engine) == ["a2"]

            ghost = await _chat(client, "base:ghost")  # not declared: never loaded
            assert ghost.status_code == 404
            assert ghost.json()["error"]["code"] == "model_not_found"
            assert ghost.json()["error"]["type"] == "not_found_error"
            assert _engine_has(adapter_engine) == ["a2"]
    finally:
        await tiers.shutdown()


async def test_adapter_loaded_over_wake_api_before_the_snapshot_shows_it(
        registry, adapter_engine, tmp_path):
    sessions, keys = registry
    with running_adapter_engine(tmp_path, "second_engine") as second:
        with sessions.begin() as s:
            q.add_backend(s, "base", second, engine="builtin", state="ready", tier="warm")
            q.bump_snapshot_version(s)
        await _over_wake_api(sessions, keys, adapter_engine, second)


async def _over_wake_api(sessions, keys, first: str, second: str) -> None:
    gateway_view = SnapshotSource(sessions)  # a gateway apart: its snapshot is not refreshed
    gateway_view.refresh()

    async def on_change():
        pass

    tiers = TierManager(sessions, EngineSupervisor(), on_change,
                        TierConfig(max_loras=1, min_residency_s=RESIDENCY_S))

    cp = _client(_control_plane(tiers, gateway_view), keys["operator"])
    starter = HttpColdStarter("http://gw", keys["operator"], gateway_view, client=cp)
    app = _gateway(gateway_view, starter)
    try:
        async with _client(app, keys["user"]) as client:
            for _ in range(2):  # the second finds it resident on the control plane's side
                answer = await _chat(client, "base:a1")
                assert answer.status_code == 200, answer.text
            assert (_engine_has(first), _engine_has(second)) == (["a1"], [])
            # a1's engine full: a2 goes to the other one, and so does the request, though the
            # gateway's snapshot lists neither (least loaded would pick the first engine)
            answer = await _chat(client, "base:a2")
            assert answer.status_code == 200, answer.text
            assert (_engine_has(first), _engine_has(second)) == (["a1"], ["a2"])
            view = gateway_view.current.models["base"]
            assert [b.adapters for b in view.backends] == [(), ()]

            busy = await _chat(client, "base:a3")  # both slots younger than the residency
            assert busy.status_code == 503 and busy.json()["error"]["code"] == \
                "adapter_slots_busy"
            assert 1 <= int(busy.headers["retry-after"]) <= RESIDENCY_S
    finally:
        await starter.aclose()
        await tiers.shutdown()


class CountingStarter(InProcessColdStarter):
    """The in-process starter, counting the adapter loads the gateway asks for."""

    loads = 0

    async def load_adapter(self, model_name, adapter, budget_s):
        self.loads += 1
        return await super().load_adapter(model_name, adapter, budget_s)


async def test_an_adapter_the_engine_reports_is_routed_not_loaded_again(
        registry, adapter_engine, snapshots, tmp_path):
    """An adapter the engine holds without a registry row (loaded at its start, e.g. vLLM's
    --lora-modules, or by hand) shows in the engine's load report: its requests go there and
    the control plane is not asked to load it once per request."""
    from engine_adapter.base import LoadView

    sessions, keys = registry
    loaded = httpx.post(adapter_engine + "/load_lora_adapter", trust_env=False, timeout=30,
                        json={"lora_name": "a1", "lora_path": str(tmp_path / "a1")})
    assert loaded.status_code == 200, loaded.text
    tiers = TierManager(sessions, EngineSupervisor(), snapshots.refresh,
                        TierConfig(max_loras=1, min_residency_s=RESIDENCY_S))
    starter = CountingStarter(tiers, snapshots)
    app = _gateway(snapshots, starter)
    backend = snapshots.current.models["base"].backends[0]
    assert backend.adapters == ()                      # the registry does not know of a1
    app.state.gateway.router.book.report(backend.id, LoadView(adapters=frozenset({"a1"})))
    try:
        async with _client(app, keys["user"]) as client:
            for _ in range(2):
                answer = await _chat(client, "base:a1")
                assert answer.status_code == 200, answer.text
        assert starter.loads == 0
    finally:
        await tiers.shutdown()
