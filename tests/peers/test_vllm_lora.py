"""LoRA on vLLM through its runtime API: loaded and unloaded through the engine adapter, requests
for `m:<adapter>` routed by affinity to the engine that holds it, refused once it is gone."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from common.metric_names import Metric
from engine_adapter import create_adapter
from tests.peers.conftest import backend_of, gateway, make_lora, model_of

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def adapter_dir(peer_dirs, tmp_path_factory):
    return make_lora(peer_dirs, tmp_path_factory.mktemp("lora-one"))


def _run(coro_fn, backend):
    async def go():
        adapter = create_adapter(backend.url, backend.engine)
        try:
            return await coro_fn(adapter)
        finally:
            await adapter.aclose()
    return asyncio.run(go())


def _decisions(gw, backend_id: str) -> float:
    return gw.state.metrics.registry.get_sample_value(
        Metric.ROUTING_DECISIONS.total,
        {"model": "m", "strategy": "lora_affinity", "backend": backend_id}) or 0.0


def test_adapter_loaded_routed_by_affinity_and_unloaded(vllm, builtin, adapter_dir):
    on_vllm = backend_of(vllm, "vllm-0", adapters=("one",))
    _run(lambda a: a.load_adapter("one", str(adapter_dir)), on_vllm)
    served = httpx.get(vllm.url + "/models", trust_env=False).json()["data"]
    assert "one" in [m["id"] for m in served]
    models = [model_of([backend_of(builtin, "builtin-0"), on_vllm], routing="lora_affinity",
                       adapters=("one",))]
    with gateway(models) as gw, gw.client(timeout=120) as c:
        def ask(model: str) -> httpx.Response:
            return c.post("/v1/chat/completions", json={"model": model, "messages": QUESTION,
                                                        "max_tokens": 12, "temperature": 0})

        for _ in range(3):   # the builtin engine is listed first and idle: affinity wins
            r = ask("m:one")
            assert r.status_code == 200, r.text
        assert _decisions(gw, "vllm-0") == 3
        with_adapter = r.json()["choices"][0]["message"]["content"]
        base = httpx.post(vllm.url + "/chat/completions", trust_env=False, timeout=120, json={
            "model": "smollm2", "messages": QUESTION, "max_tokens": 12, "temperature": 0}).json()
        assert with_adapter != base["choices"][0]["message"]["content"]

        _run(lambda a: a.unload_adapter("one"), on_vllm)
        served = httpx.get(vllm.url + "/models", trust_env=False).json()["data"]
        assert "one" not in [m["id"] for m in served]
        r = ask("m:one")
        assert r.status_code in (400, 404), r.text
        assert r.json()["error"]["message"]
