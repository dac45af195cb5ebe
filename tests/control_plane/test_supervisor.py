"""EngineSupervisor and EngineSpec: the command each engine kind runs, the environment it gets,
readiness (a vLLM must list its served name), and stopping a whole process group. The vLLM
here is tests/control_plane/fake_vllm.py (tests/peers/test_vllm_cold_start.py starts real ones)."""
from __future__ import annotations

import asyncio
import sys

import psutil
import pytest
import uvloop

from control_plane.supervisor import EngineSpec, EngineSupervisor
from tests.conftest import free_port
from tests.control_plane import fake_vllm


def test_vllm_command_renders_flags_the_way_vllm_parses_them():
    spec = EngineSpec(name="m", model="/models/m-hf", port=8201, engine="vllm",
                      executable="/opt/vllm/bin/vllm",
                      args={"enable_lora": True, "enforce_eager": False, "seed": 0,
                            "max_loras": 1, "lora_modules": ["a=/l/a", "b=/l/b"],
                            "kv_events_config": {"publisher": "zmq"}, "quantization": None})
    assert spec.command() == [
        "/opt/vllm/bin/vllm", "serve", "/models/m-hf", "--served-model-name", "m",
        "--host", "127.0.0.1", "--port", "8201", "--enable-lora", "--seed", "0",
        "--max-loras", "1", "--lora-modules", "a=/l/a", "b=/l/b",
        "--kv-events-config", '{"publisher": "zmq"}']
    assert EngineSpec(name="m", model="/m", port=1, engine="vllm").command()[0] == "vllm"


def test_builtin_command_is_unchanged_and_other_kinds_are_refused():
    spec = EngineSpec(name="m", model="smollm2", port=8100, args={"lora_roots": ["/a", "/b"]})
    assert spec.command() == [sys.executable, "-m", "builtin_engine", "serve", "--model",
                              "smollm2", "--served-model-name", "m", "--host", "127.0.0.1",
                              "--port", "8100", "--lora-roots", "/a,/b"]
    with pytest.raises(ValueError, match="startable: builtin, vllm"):
        EngineSpec(name="m", model="x", port=1, engine="sglang").command()


def test_vllm_environment_adds_engine_env_and_drops_this_projects_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/project")
    monkeypatch.setenv("INFERPLANE_ENGINE_API_KEY", "inherited")
    env = EngineSpec(name="m", model="x", port=1, engine="vllm",
                     env={"VLLM_CPU_KVCACHE_SPACE": 2}).environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and "PYTHONPATH" not in env
    assert "INFERPLANE_ENGINE_API_KEY" not in env
    assert EngineSpec(name="m", model="x", port=1).environment()["PYTHONPATH"] == "/project"


def _vllm_spec(tmp_path, **env) -> EngineSpec:
    return EngineSpec(name="m", model="/models/m-hf", port=free_port(), engine="vllm",
                      executable=str(fake_vllm.install(tmp_path)), args={"max_loras": 1},
                      env={"FAKE_VLLM_RECORD": str(tmp_path / "record.json"), **env})


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop],
                         ids=["asyncio", "uvloop"])  # `inferplane up` runs on uvloop
def test_vllm_started_ready_and_stopped_with_its_process_group(tmp_path, new_loop):
    states = []
    spec = _vllm_spec(tmp_path, MARK="set")

    async def scenario():
        supervisor = EngineSupervisor(on_state=lambda spec, state: states.append(state),
                                      ready_timeout_s=60)
        try:
            proc = await supervisor.start(spec)
            seen = fake_vllm.record(tmp_path / "record.json")
            assert seen["argv"] == spec.command()[1:] and seen["env"]["MARK"] == "set"
            child = psutil.Process(seen["child"])
            assert child.is_running() and proc.running and states == ["starting", "ready"]

            await supervisor.stop(f"m:{spec.port}")
            assert not proc.running and states[-1] == "down"
            return child
        finally:
            await supervisor.stop_all()

    with asyncio.Runner(loop_factory=new_loop) as runner:
        child = runner.run(scenario())
    # SIGTERM to the leader alone would have left the grandchild running: the group was stopped
    _gone, alive = psutil.wait_procs([child], timeout=10)
    assert alive == []


async def test_vllm_is_not_ready_until_it_lists_its_served_name(tmp_path):
    supervisor = EngineSupervisor(ready_timeout_s=2)
    spec = _vllm_spec(tmp_path, FAKE_VLLM_LISTS="some-other-model")
    try:
        with pytest.raises(TimeoutError, match="not ready"):
            await supervisor.start(spec)
        await asyncio.sleep(0)
    finally:
        await supervisor.stop_all()
