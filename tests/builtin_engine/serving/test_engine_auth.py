"""Engine authentication and adapter roots, on real engine processes (simulated executor):
`--api-key` from the environment, the supervisor's per-engine keys, and `--lora-roots`."""
from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from safetensors.numpy import save_file

from builtin_engine.serving.api_key import API_KEY_ENV
from control_plane.supervisor import EngineSpec, EngineSupervisor
from engine_adapter import create_adapter, engine_keys
from tests.conftest import free_port

CHAT = {"model": "sim", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


def _peft_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":
               np.zeros((2, 8), np.float32)}, str(path / "adapter_model.safetensors"))
    return path


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One engine started by the supervisor, as `inferplane up` starts them: its key derived
    from the fleet secret and handed over in the environment, one adapter root."""
    work = tmp_path_factory.mktemp("auth")
    root = work / "adapters"
    _peft_dir(root / "good")
    outside = _peft_dir(work / "outside" / "secret-adapter")
    (root / "escape").symlink_to(outside)  # a symlink out of the root
    engine_keys.configure("fleet-secret")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    supervisor = EngineSupervisor(ready_timeout_s=120)
    spec = EngineSpec(name="sim", model="smollm2-135m-instruct", port=free_port(),
                      args={"simulate": True, "sim_context_length": 512, "num_blocks": 64,
                            "sim_decode_base_s": 0.001, "lora_roots": [str(root)]})
    try:
        proc = asyncio.run_coroutine_threadsafe(supervisor.start(spec), loop).result(150)
        yield SimpleNamespace(url=spec.url.removesuffix("/v1"), spec=spec, pid=proc.proc.pid,
                              key=engine_keys.key_for(spec.url), root=root, work=work, loop=loop)
    finally:
        asyncio.run_coroutine_threadsafe(supervisor.stop_all(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        engine_keys.configure(None)


def _auth(key):
    return {"authorization": f"Bearer {key}"}


def test_every_route_but_health_and_metrics_needs_the_key(engine):
    url, key = engine.url, engine.key
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/metrics").status_code == 200
    for method, path, body in (("POST", "/v1/chat/completions", CHAT),
                               ("POST", "/v1/completions", {"model": "sim", "prompt": "x"}),
                               ("GET", "/v1/models", None), ("POST", "/tokenize", {"prompt": "x"}),
                               ("GET", "/kv/summary", None), ("GET", "/stats", None),
                               ("POST", "/v1/load_lora_adapter", {"lora_name": "a",
                                                                  "lora_path": "/"})):
        for headers in ({}, _auth("wrong"), {"authorization": key}):
            resp = httpx.request(method, url + path, json=body, headers=headers, timeout=30)
            assert resp.status_code == 401, (path, headers, resp.text)
            assert resp.json()["error"]["code"] == "invalid_api_key"
    resp = httpx.post(url + "/v1/chat/completions", json=CHAT, headers=_auth(key), timeout=30)
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("path_of,status,code", [
    (lambda root, work: root / "good", 200, None),
    (lambda root, work: root / "escape", 400, "lora_path_not_allowed"),      # symlink out
    (lambda root, work: root / ".." / "outside" / "secret-adapter", 400, "lora_path_not_allowed"),
    (lambda root, work: work / "outside" / "secret-adapter", 400, "lora_path_not_allowed"),
    (lambda root, work: Path("/no/such/dir"), 400, "lora_path_not_allowed"),
    (lambda root, work: root / "missing", 400, "lora_path_not_found"),       # inside: precise
])
def test_adapter_paths_are_confined_to_the_roots(engine, path_of, status, code):
    root, work = engine.root, engine.work
    name = f"a{abs(hash(str(path_of(root, work)))) % 10**6}"
    resp = httpx.post(engine.url + "/v1/load_lora_adapter", headers=_auth(engine.key), timeout=30,
                      json={"lora_name": name, "lora_path": str(path_of(root, work))})
    assert resp.status_code == status, resp.text
    if code:
        error = resp.json()["error"]
        assert error["code"] == code and error["param"] == "lora_path"
        if code == "lora_path_not_allowed":  # the same words whether the path exists or not
            assert error["message"] == "lora_path is outside the engine's adapter roots " \
                                       "(--lora-roots)"


def test_without_roots_runtime_loading_is_refused(tmp_path):
    from builtin_engine.errors import EngineError
    from builtin_engine.serving.adapters import AdapterRegistry

    with pytest.raises(EngineError, match="--lora-roots"):
        AdapterRegistry(roots=[]).confine(str(_peft_dir(tmp_path / "a")))


def test_each_engine_has_its_own_key_kept_out_of_argv_and_the_registry(engine):
    other = engine_keys.key_for(f"http://127.0.0.1:{engine.spec.port + 1}/v1")
    assert engine.key and other and engine.key != other
    cmdline = Path(f"/proc/{engine.pid}/cmdline").read_bytes()
    assert engine.key.encode() not in cmdline and b"fleet-secret" not in cmdline
    assert engine.key not in json.dumps(engine.spec.command())  # stored as the backend command
    assert f"{API_KEY_ENV}={engine.key}".encode() in Path(f"/proc/{engine.pid}/environ").read_bytes()


def test_the_adapters_the_gateway_and_tiers_use_carry_the_key(engine):
    async def call():
        adapter = create_adapter(engine.spec.url, "builtin")
        try:
            reply = await adapter.chat(dict(CHAT))
            tokens = await adapter.tokenize({"prompt": "hello"})
            kv = await adapter.kv_summary()
        finally:
            await adapter.aclose()
        return reply, tokens, kv

    reply, tokens, kv = asyncio.run_coroutine_threadsafe(call(), engine.loop).result(60)
    assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    assert tokens and kv is not None
