"""Precise prefix routing on vLLM: the gateway's index built from vLLM's KV cache events agrees
with the prefix-cache hits vLLM itself counts, follows a cache reset, and routes prompts to the
engine that holds them (vLLM by events, the builtin engine by /kv/summary)."""
from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench._real_engines import SERVED
from common.metric_names import EngineMetric, Metric
from gateway.routing.resident import token_block_hashes
from tests.peers.conftest import backend_of, gateway, model_of


@pytest.fixture(scope="module")
def gw(vllm, builtin):
    routing = {"strategy": "prefix_aware", "prefix_precise": True, "load_poll_interval_s": 0.2,
               "prefix_load_slack": 8,
               "kv_events": {"vllm-0": {"endpoint": vllm.kv_endpoint, "topic": "kv", "bind": True,
                                        "replay_endpoint": vllm.replay_endpoint}}}
    models = [model_of([backend_of(vllm, "vllm-0"), backend_of(builtin, "builtin-0")],
                       routing="prefix_aware")]
    with gateway(models, routing=routing) as running:
        yield running


def doc(topic: str, n: int = 40) -> list[dict]:
    facts = " ".join(f"The {topic} item {j} weighs {j * 7 + 3} grams." for j in range(n))
    return [{"role": "system", "content": facts},
            {"role": "user", "content": f"Which {topic} item is the heaviest?"}]


def tokens(engine, messages) -> list[int]:
    r = httpx.post(engine.root + "/tokenize", trust_env=False, timeout=30,
                   json={"model": SERVED, "messages": messages, "add_generation_prompt": True})
    r.raise_for_status()
    return r.json()["tokens"]


def direct_chat(engine, messages) -> None:
    r = httpx.post(engine.url + "/chat/completions", trust_env=False, timeout=120, json={
        "model": SERVED, "messages": messages, "max_tokens": 1, "temperature": 0})
    r.raise_for_status()


def prefix_hits(engine) -> float:
    return sum(s.value for f in text_string_to_metric_families(engine.metrics())
               for s in f.samples if s.name == EngineMetric.PREFIX_CACHE_HITS.total)


def wait_for(predicate, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_index_agrees_with_vllm_prefix_cache_hits(gw, vllm):
    resident = gw.state.router.resident
    first = doc("apple")
    ids = tokens(vllm, first)
    direct_chat(vllm, first)          # cached on vLLM without the gateway routing it
    wait_for(lambda: resident.knows("vllm-0"), what="vLLM's first KV event")
    bs = resident.block_size("vllm-0")
    assert len(ids) >= 3 * bs, (len(ids), bs)
    wait_for(lambda: resident.match("vllm-0", token_block_hashes(ids, bs)) == len(ids) // bs,
             what="the prompt's blocks in the index")
    # a prompt sharing the first part only: the index predicts the hits vLLM then counts
    second = doc("apple", 20) + []
    second[0] = {"role": "system", "content": first[0]["content"][:len(first[0]["content"]) // 2]
                 + " Pears are different."}
    ids2 = tokens(vllm, second)
    predicted = resident.match("vllm-0", token_block_hashes(ids2, bs))
    assert 0 < predicted < len(ids2) // bs
    before = prefix_hits(vllm)
    direct_chat(vllm, second)
    assert prefix_hits(vllm) - before == min(predicted, (len(ids2) - 1) // bs) * bs
    # and the same prompt again: every full block but a last one that holds the final token
    before = prefix_hits(vllm)
    direct_chat(vllm, first)
    full = resident.match("vllm-0", token_block_hashes(ids, bs))
    assert prefix_hits(vllm) - before == min(full, (len(ids) - 1) // bs) * bs


def _decisions(gw, backend_id: str) -> float:
    return gw.state.metrics.registry.get_sample_value(
        Metric.ROUTING_DECISIONS.total,
        {"model": "m", "strategy": "prefix_aware", "backend": backend_id}) or 0.0


def test_prompts_go_where_their_blocks_are(gw, vllm, builtin):
    on_vllm, on_builtin = doc("cherry"), doc("plum")
    direct_chat(vllm, on_vllm)
    direct_chat(builtin, on_builtin)
    resident = gw.state.router.resident
    wait_for(lambda: resident.match(
        "vllm-0", token_block_hashes(tokens(vllm, on_vllm), resident.block_size("vllm-0"))) > 2,
        what="vLLM's blocks")
    wait_for(lambda: resident.match(
        "builtin-0", token_block_hashes(tokens(builtin, on_builtin), 16)) > 10,
        what="the builtin engine's blocks")
    with gw.client(timeout=120) as c:
        for messages, backend_id in ((on_vllm, "vllm-0"), (on_builtin, "builtin-0")) * 2:
            before = _decisions(gw, backend_id)
            r = c.post("/v1/chat/completions", json={"model": "m", "messages": messages,
                                                     "max_tokens": 2, "temperature": 0})
            assert r.status_code == 200, r.text
            assert _decisions(gw, backend_id) == before + 1, backend_id


def test_cache_reset_clears_the_index(gw, vllm):
    resident = gw.state.router.resident
    direct_chat(vllm, doc("grape"))
    wait_for(lambda: resident.knows("vllm-0"), what="vLLM's blocks")
    ids = tokens(vllm, doc("grape"))
    bs = resident.block_size("vllm-0")
    wait_for(lambda: resident.match("vllm-0", token_block_hashes(ids, bs)) > 2, what="grape")
    r = httpx.post(vllm.root + "/reset_prefix_cache", trust_env=False, timeout=30)
    assert r.status_code == 200, r.text
    # vLLM publishes the events of a step when it takes one: the next request carries the reset
    melon = tokens(vllm, doc("melon"))
    direct_chat(vllm, doc("melon"))
    wait_for(lambda: resident.match("vllm-0", token_block_hashes(melon, bs)) > 2, what="melon")
    assert resident.match("vllm-0", token_block_hashes(ids, bs)) == 0
