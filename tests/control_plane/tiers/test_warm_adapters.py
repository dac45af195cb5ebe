"""Warm tier: AdapterManager loads LoRA adapters on a real simulated engine through the vLLM
adapter API, evicts least recently used first, never before the minimum residency, and keeps
the registry's BackendAdapter rows (and so the routing snapshot) in step."""
from __future__ import annotations

import time

import httpx
import pytest
from sqlalchemy import select

from control_plane.supervisor import EngineSpec, EngineSupervisor
from control_plane.tiers import (AdapterManager, AdapterSlotsBusy, NoEngineForAdapter, TierConfig,
                                 TierManager, UnknownAdapter)
from registry import queries as q
from registry.orm.catalog import Adapter, BackendAdapter
from tests.control_plane.tiers.conftest import add_model, make_peft_dir

RESIDENCY_S = 2.0


def _engine_has(base_url: str) -> list[str]:
    data = httpx.get(f"{base_url}/lora_adapters", timeout=10).json()["data"]
    return sorted(a["name"] for a in data)


def _rows(sessions) -> list[str]:
    with sessions() as s:
        return sorted(s.scalars(select(Adapter.name).join(
            BackendAdapter, BackendAdapter.adapter_id == Adapter.id)))


@pytest.fixture
def registry_with_adapters(sessions, adapter_engine, tmp_path):
    add_model(sessions, "base", "warm")
    with sessions.begin() as s:
        model = q.get_model(s, "base")
        q.add_backend(s, "base", adapter_engine, engine="builtin", state="ready", tier="warm")
        for name in ("a1", "a2", "a3"):
            q.add_adapter(s, model, name, source_uri=str(make_peft_dir(tmp_path, name)), rank=4)
        q.add_adapter(s, model, "nowhere", source_uri=None)
        q.bump_snapshot_version(s)
    return sessions


async def test_lru_eviction_respects_residency(registry_with_adapters, adapter_engine, snapshots):
    sessions = registry_with_adapters
    changes = []

    async def on_change():
        changes.append(1)
        snapshots.refresh()

    tiers = TierManager(sessions, EngineSupervisor(), on_change,
                        TierConfig(max_loras=2, min_residency_s=RESIDENCY_S))
    manager = tiers.adapters
    try:
        assert await manager.ensure_loaded("base", "a1") == adapter_engine
        await manager.ensure_loaded("base", "a2")
        assert _engine_has(adapter_engine) == ["a1", "a2"] == _rows(sessions)
        backend = snapshots.current.models["base"].backends[0]
        assert backend.adapters == ("a1", "a2")

        # Both slots are younger than the residency: a third adapter must not evict either.
        with pytest.raises(AdapterSlotsBusy) as busy:
            await manager.ensure_loaded("base", "a3")
        assert 0 < busy.value.retry_after_s <= RESIDENCY_S
        assert _engine_has(adapter_engine) == ["a1", "a2"]

        manager.note_use(adapter_engine, "a1")  # a2 is now least recently used
        started = time.monotonic()
        await manager.ensure_loaded("base", "a3", wait_s=RESIDENCY_S + 5)
        assert time.monotonic() - started >= RESIDENCY_S * 0.5  # it waited for residency
        assert _engine_has(adapter_engine) == ["a1", "a3"] == _rows(sessions)
        assert manager.resident(adapter_engine) == ["a1", "a3"]
        assert snapshots.current.models["base"].backends[0].adapters == ("a1", "a3")

        loads_before = len(changes)
        await manager.ensure_loaded("base", "a1")  # resident: no engine call, no registry write
        assert len(changes) == loads_before

        # The engine restarts (supervisor reports it): its adapters are gone everywhere.
        port = int(adapter_engine.rsplit(":", 1)[1].split("/")[0])
        await tiers.on_engine_state(EngineSpec(name="base", model="m", port=port), "starting")
        assert _rows(sessions) == [] and manager.resident(adapter_engine) == []
        assert snapshots.current.models["base"].backends[0].adapters == ()
    finally:
        await manager.aclose()


async def test_adapter_errors(registry_with_adapters, adapter_engine, sessions):
    async def on_change():
        pass

    manager = AdapterManager(sessions, on_change, max_loras=2, min_residency_s=RESIDENCY_S)
    try:
        with pytest.raises(UnknownAdapter, match="no adapter 'ghost'"):
            await manager.ensure_loaded("base", "ghost")
        with pytest.raises(UnknownAdapter, match="no source_uri"):
            await manager.ensure_loaded("base", "nowhere")
        with sessions.begin() as s:  # the only engine goes down
            backend = q.list_backends(s, "base")[0]
            q.set_backend_state(s, backend.id, "down")
        with pytest.raises(NoEngineForAdapter):
            await manager.ensure_loaded("base", "a1")
        assert _engine_has(adapter_engine) == []
    finally:
        await manager.aclose()
