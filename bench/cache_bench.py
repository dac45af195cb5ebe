"""Response cache: what a hit costs and how often the semantic cache answers.

    python bench/cache_bench.py [--requests 300] [--output result.json]
    inferplane bench cache-bench

Three processes: the fast mock engine (bench/_mock_engine.py), the builtin embedding engine
serving all-minilm-l6-v2, and one gateway (static snapshot, in-process cache) in front of
both. Sequential keep-alive requests, median latencies, all measured in this run:

- direct: the mock engine called directly (the floor), and the gateway on an uncached model;
- exact: a miss (a new prompt each time) and a hit (the same prompt); what a hit adds over
  the direct call and saves over a miss;
- semantic: the 30 stored questions of bench/data/cache_paraphrases.json, then their
  paraphrases (should hit), 30 unrelated questions and 8 near misses (should not), at two
  thresholds; hit rate, false-hit rate, the latency of a semantic hit and the embedding call
  it includes (the embedding engine called directly);
- the gateway's own lookup time (inferplane_cache_lookup_seconds, mean per kind).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import ROOT, SECRET, free_port, spawn

DATA = ROOT / "bench" / "data" / "cache_paraphrases.json"
EMBEDDING_MODEL = "all-minilm-l6-v2"
THRESHOLDS = (0.85, 0.9)


def serve_gateway(port: int, engine_port: int, embed_port: int) -> None:
    """Child process: the gateway with models `plain` (uncached), `exact`, and `sem85` /
    `sem90` (semantic at those thresholds), all on the mock engine."""
    sys.path.insert(0, str(ROOT))
    import uvicorn

    from common.auth.keys import hash_key
    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings
    from registry.cache_policy import CachePolicy
    from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot

    def view(name: str, url: str, served: str, cache=None, task="chat") -> ModelView:
        b = BackendView(id=name, url=url, engine="vllm", served_model=served, gpu=None,
                        weight=1.0, tier="hot", state="ready", adapters=(), version=None)
        return ModelView(name=name, context_length=8192, backends=(b,), routing="least_loaded",
                         fallbacks=(), tier="hot", price_in_per_1k=0.0, price_out_per_1k=0.0,
                         splits=(), cache=cache, task=task)

    mock = f"http://127.0.0.1:{engine_port}/v1"
    models = [view("plain", mock, "mock"), view("exact", mock, "mock", CachePolicy()),
              view(EMBEDDING_MODEL, f"http://127.0.0.1:{embed_port}/v1", EMBEDDING_MODEL,
                   task="embedding")]
    models += [view(f"sem{round(t * 100)}", mock, "mock",
                    CachePolicy(exact=False, semantic=True, threshold=t)) for t in THRESHOLDS]
    key = KeyView(key_id=1, key_hash=hash_key(SECRET), name="bench", team="bench", role="user",
                  models=None, rpm_limit=None, tpm_limit=None, max_budget=None,
                  priority="standard", expires_at=None, revoked=False)

    class Source:
        current = RoutingSnapshot(version=1, models={m.name: m for m in models}, aliases={},
                                  keys={key.key_hash: key})

    settings = GatewaySettings(routing={"load_poll_interval_s": 0}, log_level="WARNING",
                               tracing={"enabled": False})
    uvicorn.run(create_gateway_app(settings, Source()), host="127.0.0.1", port=port,
                log_level="warning", loop="uvloop", http="httptools", access_log=False)


def chat(model: str, content: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "temperature": 0, "max_tokens": 4}


def timed(client: httpx.Client, url: str, body: dict) -> tuple[float, str | None]:
    started = time.perf_counter()
    reply = client.post(url, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    assert reply.status_code == 200, reply.text
    return elapsed, reply.headers.get("x-inferplane-cache")


def median_ms(client: httpx.Client, url: str, bodies, expect: str | None) -> float:
    times = []
    for body in bodies:
        elapsed, header = timed(client, url, body)
        assert header == expect, f"expected {expect}, got {header}"
        times.append(elapsed)
    return statistics.median(times)


def semantic_run(client: httpx.Client, gw: str, model: str, data: dict) -> dict:
    url = gw + "/v1/chat/completions"
    for stored, _ in data["pairs"]:
        timed(client, url, chat(model, stored))
    hits, hit_ms = 0, []
    for _, paraphrase in data["pairs"]:
        elapsed, header = timed(client, url, chat(model, paraphrase))
        if header == "hit":
            hits += 1
            hit_ms.append(elapsed)
    controls = sum(timed(client, url, chat(model, q))[1] == "hit" for q in data["controls"])
    near = sum(timed(client, url, chat(model, q))[1] == "hit" for _, q in data["near_misses"])
    n, c, k = len(data["pairs"]), len(data["controls"]), len(data["near_misses"])
    return {"paraphrase_hits": hits, "paraphrases": n, "hit_rate": hits / n,
            "control_false_hits": controls, "controls": c,
            "near_miss_false_hits": near, "near_misses": k,
            "false_hit_rate": (controls + near) / (c + k),
            "semantic_hit_p50_ms": statistics.median(hit_ms) if hit_ms else None}


def lookup_means(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    sums: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("inferplane_cache_lookup_seconds_") and "kind" in s.labels:
                sums[(s.labels["kind"], s.name.rsplit("_", 1)[1])] = s.value
    return {kind: sums[(kind, "sum")] / sums[(kind, "count")] * 1000
            for kind in ("exact", "semantic") if sums.get((kind, "count"))}


def in_process() -> dict:
    """The cache's own work per request, timed in this process: keying a chat request, and
    a nearest-neighbour search among 10,000 stored 384-d vectors of one partition."""
    import asyncio

    import numpy as np

    sys.path.insert(0, str(ROOT))
    from gateway.cache.entry import CachedAnswer
    from gateway.cache.keys import request_keys
    from gateway.cache.semantic import SemanticIndex

    body = {**chat("m", "What is the capital of France? " * 8), "messages": [
        {"role": "system", "content": "You are a helpful assistant. " * 10},
        {"role": "user", "content": "What is the capital of France? " * 8}]}
    started = time.perf_counter()
    for _ in range(10_000):
        request_keys("team:t", "m", "v1", "chat", body, True)
    keys_us = (time.perf_counter() - started) / 10_000 * 1e6
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((10_000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = SemanticIndex(20_000, 1 << 30)
    answer = CachedAnswer.json(b"{}", "m")

    async def fill_and_search() -> float:
        for v in vectors:
            await index.add("p", v, answer, ttl_s=3600)
        started = time.perf_counter()
        for v in vectors[:1000]:
            await index.search("p", v, 0.9)
        return (time.perf_counter() - started) / 1000 * 1e6
    return {"request_keys_us": keys_us, "ann_search_10k_us": asyncio.run(fill_and_search())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    data = json.loads(DATA.read_text())
    engine_port, embed_port, gw_port = free_port(), free_port(), free_port()
    logs = Path(tempfile.mkdtemp(prefix="cache-bench-"))
    procs = []
    try:
        procs.append(spawn([str(ROOT / "bench" / "_mock_engine.py"), "--port",
                            str(engine_port)], f"http://127.0.0.1:{engine_port}/health",
                           logs / "engine.log"))
        procs.append(spawn(["-m", "builtin_engine", "serve", "--model", EMBEDDING_MODEL,
                            "--port", str(embed_port)], f"http://127.0.0.1:{embed_port}/health",
                           logs / "embed.log"))
        serve = (f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import cache_bench; "
                 f"cache_bench.serve_gateway({gw_port}, {engine_port}, {embed_port})")
        procs.append(spawn(["-c", serve], f"http://127.0.0.1:{gw_port}/healthz",
                           logs / "gateway.log"))
        result = measure(args.requests, data, f"http://127.0.0.1:{engine_port}",
                         f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{embed_port}")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
    result["in_process"] = in_process()
    result["command"] = " ".join(sys.argv)
    print(json.dumps(result, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))
    return 0


def measure(n: int, data: dict, engine: str, gw: str, embed: str) -> dict:
    headers = {"Authorization": f"Bearer {SECRET}"}
    with httpx.Client(headers=headers, trust_env=False, timeout=30) as client:
        url = gw + "/v1/chat/completions"
        for _ in range(20):    # warm connections and code paths
            client.post(engine + "/v1/chat/completions", json=chat("mock", "warm"))
            client.post(url, json=chat("plain", "warm"))
        direct = median_ms(client, engine + "/v1/chat/completions",
                           [chat("mock", "same") for _ in range(n)], None)
        plain = median_ms(client, url, [chat("plain", "same") for _ in range(n)], None)
        miss = median_ms(client, url, [chat("exact", f"prompt {i}") for i in range(n)], "miss")
        hit = median_ms(client, url, [chat("exact", "prompt 0") for _ in range(n)], "hit")
        embed_direct = median_ms(client, embed + "/v1/embeddings", [
            {"model": EMBEDDING_MODEL, "input": q} for q, _ in data["pairs"] * 3], None)
        semantic = {str(t): semantic_run(client, gw, f"sem{round(t * 100)}", data)
                    for t in THRESHOLDS}
        lookups = lookup_means(client.get(gw + "/metrics").text)
    out = {
        "requests_per_point": n,
        "p50_ms": {"direct_engine": direct, "gateway_uncached": plain, "exact_miss": miss,
                   "exact_hit": hit, "embedding_direct": embed_direct},
        "exact_hit_added_vs_direct_ms": hit - direct,
        "exact_hit_vs_direct_ratio": hit / direct,
        "exact_hit_vs_miss_ratio": hit / miss,
        "exact_miss_added_vs_uncached_ms": miss - plain,
        "lookup_mean_ms": lookups,
        "semantic": semantic,
    }
    for s in semantic.values():
        if s["semantic_hit_p50_ms"] is not None:
            s["semantic_hit_added_vs_direct_ms"] = s["semantic_hit_p50_ms"] - direct
            s["semantic_hit_vs_exact_hit_ratio"] = s["semantic_hit_p50_ms"] / hit
    return out


if __name__ == "__main__":
    sys.exit(main())
