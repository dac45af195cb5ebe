"""vLLM's real /metrics through the gateway's load poller: running, waiting, KV usage and prefix
hits in the gateway's view of the backend, and health probing through the engine adapter."""
from __future__ import annotations

import asyncio
import threading
import time

import httpx

from common.metric_names import EngineMetric
from engine_adapter import create_adapter
from engine_adapter.metrics_parse import parse_load
from tests.peers.conftest import backend_of, gateway, model_of

# a long shared system prompt: several full KV blocks, whatever vLLM's block size
SYSTEM = " ".join(f"Rule {i}: answer politely and mention the number {i * 3}." for i in range(60))
LONG = [{"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Tell me a long story about a dragon and a castle."}]


def _load(gw, backend_id: str):
    return gw.state.router.book.engine_view(backend_id)


def test_real_metrics_parse_into_a_load_view(vllm):
    text = vllm.metrics()
    for family in (EngineMetric.NUM_REQUESTS_RUNNING, EngineMetric.NUM_REQUESTS_WAITING,
                   EngineMetric.KV_CACHE_USAGE_PERC, EngineMetric.PREFIX_CACHE_QUERIES):
        assert family in text, family
    view = parse_load("vllm", text)
    assert 0.0 <= view.kv_usage <= 1.0 and view.running >= 0 and view.waiting >= 0


def test_health_probe_and_load_through_the_adapter(vllm):
    adapter = create_adapter(vllm.url, "vllm")

    async def probe():
        try:
            return await adapter.health(), await adapter.load()
        finally:
            await adapter.aclose()

    healthy, view = asyncio.run(probe())
    assert healthy is True and view.kv_usage >= 0.0


def test_busy_engine_shows_running_waiting_kv_and_prefix_hits(vllm):
    # max_num_seqs is 16: 22 requests at once leave some waiting
    with gateway([model_of([backend_of(vllm, "vllm-0")])],
                 routing={"load_poll_interval_s": 0.05}) as gw:
        seen = {"running": 0.0, "waiting": 0.0, "kv": 0.0}

        def send():
            with gw.client(timeout=300) as c:
                r = c.post("/v1/chat/completions", json={"model": "m", "messages": LONG,
                                                         "max_tokens": 48, "temperature": 0,
                                                         "ignore_eos": True})
                assert r.status_code == 200, r.text

        threads = [threading.Thread(target=send) for _ in range(22)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            view = _load(gw, "vllm-0")
            seen["running"] = max(seen["running"], view.running)
            seen["waiting"] = max(seen["waiting"], view.waiting)
            seen["kv"] = max(seen["kv"], view.kv_usage)
            time.sleep(0.02)
        for t in threads:
            t.join()
        assert seen["running"] >= 2 and seen["waiting"] >= 1 and seen["kv"] > 0, seen
        # the same prompt 22 times: all but the first found its blocks cached
        time.sleep(0.5)   # a poll after the last request finished
        assert _load(gw, "vllm-0").prefix_hit_rate > 0
        raw = httpx.get(vllm.root + "/metrics", trust_env=False).text
        assert parse_load("vllm", raw).prefix_hit_rate == _load(gw, "vllm-0").prefix_hit_rate
