"""Cold tier end to end: the gateway's in-process ColdStarter asks the TierManager, which has
the real EngineSupervisor start a simulated builtin engine (or a stand-in vLLM CLI); the request
gets a ready backend within its budget, and the engine is stopped again once idle. Hot engines
are kept running."""
from __future__ import annotations

import asyncio
import time

import httpx
import psutil
from sqlalchemy import select

from control_plane.bootstrap import set_backend_state
from control_plane.supervisor import EngineSupervisor
from control_plane.tiers import EngineTemplate, TierConfig, TierManager
from control_plane.tiers.cold_starter import InProcessColdStarter
from control_plane.tiers.store import set_model_tier
from engine_adapter import engine_keys
from gateway.traffic.coldstart import has_ready_backend
from registry.orm.catalog import Backend
from tests.conftest import free_port
from tests.control_plane import fake_vllm
from tests.control_plane.tiers.conftest import SIM_ARGS, SIM_MODEL, add_model

BUDGET_S = 90.0
IDLE_S = 2.0


def _supervisor(sessions, snapshots) -> EngineSupervisor:
    async def on_state(spec, state):  # what `inferplane up` wires
        if await asyncio.to_thread(set_backend_state, sessions, spec.url, state):
            snapshots.refresh()
    return EngineSupervisor(on_state=on_state, ready_timeout_s=BUDGET_S)


def _manager(sessions, snapshots, supervisor, models, **config) -> TierManager:
    engines = {m: EngineTemplate(SIM_MODEL, args=dict(SIM_ARGS)) for m in models}
    config.setdefault("idle_s", IDLE_S)
    return TierManager(sessions, supervisor, snapshots.refresh,
                       TierConfig(engines=engines, start_timeout_s=BUDGET_S,
                                  port_base=free_port(), **config))


def _backend_rows(sessions) -> list[tuple[str, str]]:
    with sessions() as s:
        return [(b.url, b.state) for b in s.scalars(select(Backend))]


async def _until(predicate, timeout_s: float, tick=None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if tick is not None:
            await tick()
        if predicate():
            return True
        await asyncio.sleep(0.2)
    return False


async def test_cold_model_starts_on_first_request_and_scales_to_zero(sessions, snapshots):
    add_model(sessions, "sleepy", "cold")
    snapshots.refresh()
    supervisor = _supervisor(sessions, snapshots)
    tiers = _manager(sessions, snapshots, supervisor, ["sleepy"])
    starter = InProcessColdStarter(tiers, snapshots)
    try:
        assert not has_ready_backend(snapshots.current, "sleepy") and not supervisor.processes
        started = time.monotonic()
        results = await asyncio.gather(*(starter.ensure_backend("sleepy", BUDGET_S)
                                         for _ in range(3)))
        assert results == [True, True, True] and time.monotonic() - started < BUDGET_S
        assert len(supervisor.processes) == 1  # concurrent requests shared one start
        (backend,) = snapshots.current.models["sleepy"].backends
        assert backend.state == "ready" and backend.managed
        reply = httpx.post(backend.url + "/chat/completions", timeout=30, json={
            "model": "sleepy", "max_tokens": 3, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3

        # Requests keep it alive past idle_s ...
        for _ in range(int(IDLE_S / 0.5) + 3):
            starter.note_request("sleepy")
            await tiers.tick()
            await asyncio.sleep(0.5)
        assert len(supervisor.processes) == 1
        proc = next(iter(supervisor.processes.values())).proc

        # ... and without them it scales to zero: process gone, registry row gone.
        assert await _until(lambda: not supervisor.processes, IDLE_S + 15, tiers.tick)
        assert proc.returncode is not None
        assert _backend_rows(sessions) == []
        assert snapshots.current.models["sleepy"].backends == ()

        # The next request starts it again.
        assert await starter.ensure_backend("sleepy", BUDGET_S)
        assert len(supervisor.processes) == 1
    finally:
        await tiers.shutdown()
        await supervisor.stop_all()


async def test_engine_budget_evicts_idle_cold_and_protects_warm(sessions, snapshots):
    add_model(sessions, "first", "cold")
    add_model(sessions, "second", "cold")
    add_model(sessions, "no-engine", "cold")
    supervisor = _supervisor(sessions, snapshots)
    tiers = _manager(sessions, snapshots, supervisor, ["first", "second"], max_engines=1,
                     idle_s=600.0)
    starter = InProcessColdStarter(tiers, snapshots)
    try:
        assert not await starter.ensure_backend("no-engine", 5.0)  # nothing to start: False
        assert not await starter.ensure_backend("missing-model", 5.0)
        assert await starter.ensure_backend("first", BUDGET_S)
        set_model_tier(sessions, "first", "warm")  # warm engines are not evicted
        assert not await starter.ensure_backend("second", 10.0)
        assert [p.spec.name for p in supervisor.processes.values()] == ["first"]

        set_model_tier(sessions, "first", "cold")
        assert await starter.ensure_backend("second", BUDGET_S)
        assert [p.spec.name for p in supervisor.processes.values()] == ["second"]
        snapshots.refresh()
        assert snapshots.current.models["first"].backends == ()
    finally:
        await tiers.shutdown()
        await supervisor.stop_all()


async def test_hot_model_is_kept_running(sessions, snapshots):
    add_model(sessions, "pinned", "hot")
    supervisor = _supervisor(sessions, snapshots)
    tiers = _manager(sessions, snapshots, supervisor, ["pinned"], idle_s=0.5)
    try:
        await tiers.tick()  # starts the missing replica
        assert [p.spec.name for p in supervisor.processes.values()] == ["pinned"]
        assert _backend_rows(sessions)[0][1] == "ready"
        await asyncio.sleep(1.0)
        await tiers.tick()  # idle far past idle_s: hot engines are never stopped
        assert len(supervisor.processes) == 1 and next(
            iter(supervisor.processes.values())).running
    finally:
        await tiers.shutdown()
        await supervisor.stop_all()


async def test_cold_vllm_template_runs_its_executable_and_stops_as_a_group(sessions, snapshots,
                                                                           tmp_path, monkeypatch):
    monkeypatch.setattr(engine_keys, "_secret", b"cold-start-test-secret")  # engines are keyed
    add_model(sessions, "lazy-vllm", "cold")
    supervisor = _supervisor(sessions, snapshots)
    record = tmp_path / "record.json"
    template = EngineTemplate("/models/m-hf", args={"max_loras": 1}, engine="vllm",
                              executable=str(fake_vllm.install(tmp_path)),
                              env={"FAKE_VLLM_RECORD": str(record)})
    tiers = TierManager(sessions, supervisor, snapshots.refresh, TierConfig(
        engines={"lazy-vllm": template}, start_timeout_s=BUDGET_S, port_base=free_port(),
        idle_s=IDLE_S, executables=[template.executable]))
    starter = InProcessColdStarter(tiers, snapshots)
    try:
        assert await starter.ensure_backend("lazy-vllm", BUDGET_S)
        (backend,) = snapshots.current.models["lazy-vllm"].backends
        assert (backend.engine, backend.state, backend.served_model) == ("vllm", "ready",
                                                                          "lazy-vllm")
        with sessions() as s:
            command = s.scalar(select(Backend.command))
            assert command[:3] == [template.executable, "serve", "/models/m-hf"]
        # keyed through its environment (ready: the supervisor's /v1/models sent the key),
        # and the key is on no command line
        started = fake_vllm.record(record)
        key = engine_keys.key_for(backend.url)
        assert started["env"]["VLLM_API_KEY"] == key and key not in " ".join(command)
        assert httpx.get(backend.url + "/models").status_code == 401
        assert httpx.get(backend.url + "/models",
                         headers=engine_keys.headers_for(backend.url)).status_code == 200
        child = psutil.Process(started["child"])
        assert await _until(lambda: not supervisor.processes, IDLE_S + 15, tiers.tick)
        _gone, alive = psutil.wait_procs([child], timeout=10)
        assert alive == [] and _backend_rows(sessions) == []
    finally:
        await tiers.shutdown()
        await supervisor.stop_all()
