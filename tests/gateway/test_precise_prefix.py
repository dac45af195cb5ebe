"""Precise prefix-aware routing against real simulated builtin engines: the gateway reads each
engine's resident KV blocks and sends a prompt to the engine already holding its prefix."""
from __future__ import annotations

import time

import httpx
import pytest

from builtin_engine.core.block_pool import hash_prompt_blocks
from common.metric_names import Metric
from gateway.routing.resident import ResidentBlocks, token_block_hashes
from tests.gateway.conftest import backend, chat_body, model
from tests.gateway.sim_engines import SERVED, start_sim_engines, stop_sim_engines

PRECISE = {"strategy": "prefix_aware", "prefix_precise": True, "load_poll_interval_s": 0.1,
           "prefix_load_slack": 2}


@pytest.fixture(scope="module")
def sims():
    engines = start_sim_engines(3)
    yield engines
    stop_sim_engines(engines)


def _system(i: int) -> dict:
    facts = " ".join(f"fact-{i}-{j} is number {j * 7 + i}." for j in range(60))
    return {"role": "system", "content": f"Document {i}. {facts}"}


def _tokens(engine, messages) -> list[int]:
    r = httpx.post(engine.root + "/tokenize", trust_env=False,
                   json={"model": SERVED, "messages": messages, "add_generation_prompt": True})
    return r.json()["tokens"]


def _wait_resident(gw, backend_id: str, hashes: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gw.state.router.resident.match(backend_id, hashes) >= len(hashes):
            return
        time.sleep(0.05)
    raise AssertionError(f"gateway never saw {backend_id}'s resident blocks")


def _decisions(gw, backend_id: str) -> float:
    return gw.state.metrics.registry.get_sample_value(
        Metric.ROUTING_DECISIONS.total,
        {"model": "m", "strategy": "prefix_aware", "backend": backend_id}) or 0.0


def test_hashes_match_the_engine():
    ids = list(range(1000, 1100))
    assert token_block_hashes(ids, 16) == hash_prompt_blocks(ids, 16)
    assert token_block_hashes(ids[:15], 16) == []


def test_resident_rejects_unknown_hash_schemes():
    blocks = ResidentBlocks()
    good = {"block_size": 16, "resident_hashes": ["00000000000000ff"],
            "hash": {"algorithm": "xxh64", "seed": 0, "root_parent_hash": 0}}
    blocks.update("b", good)
    assert blocks.match("b", [255, 1]) == 1 and blocks.block_size("b") == 16
    blocks.update("b", {**good, "hash": {"algorithm": "sha256"}})
    assert not blocks.knows("b")
    blocks.update("b", {**good, "resident_hashes": ["not-hex"]})
    assert not blocks.knows("b")
    blocks.update("b", None)
    assert not blocks.knows("b")


def test_prompt_goes_to_the_engine_holding_its_prefix(sims, make_gateway):
    gw = make_gateway([model("m", [e.backend() for e in sims], routing="prefix_aware")],
                      routing=PRECISE)
    # Warm each engine directly with its own document: only the engines know what they hold.
    for i in (2, 1, 0):
        sims[i].chat([_system(i), {"role": "user", "content": "warm up"}])
    for i, engine in enumerate(sims):
        prefix = token_block_hashes(_tokens(engine, [_system(i)]), 16)[:-1]
        _wait_resident(gw, engine.name, prefix)
    with gw.client() as c:
        for i in (1, 2, 0):
            before = _decisions(gw, sims[i].name)
            messages = [_system(i), {"role": "user", "content": f"what is fact-{i}-3?"}]
            r = c.post("/v1/chat/completions",
                       json={"model": "m", "messages": messages, "max_tokens": 2})
            assert r.status_code == 200, r.text
            assert _decisions(gw, sims[i].name) == before + 1, f"document {i} went elsewhere"
            cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached >= 16 * 20, cached
    hit = gw.state.metrics.registry.get_sample_value(Metric.PREFIX_HIT_TOKENS.total,
                                                     {"model": "m"})
    assert hit >= 3 * 16 * 20


def test_a_busy_holder_loses_the_prefix_to_an_idle_engine(sims, make_gateway):
    gw = make_gateway([model("m", [e.backend() for e in sims], routing="prefix_aware")],
                      routing=PRECISE)
    sims[1].chat([_system(7), {"role": "user", "content": "warm up"}])
    _wait_resident(gw, sims[1].name, token_block_hashes(_tokens(sims[1], [_system(7)]), 16)[:-1])
    for _ in range(5):   # five requests in flight on the holder: beyond the slack of 2
        gw.state.router.book.acquire(sims[1].name)
    with gw.client() as c:
        body = {"model": "m", "messages": [_system(7), {"role": "user", "content": "q"}],
                "max_tokens": 2}
        assert c.post("/v1/chat/completions", json=body).status_code == 200
    assert _decisions(gw, sims[1].name) == 0


def test_engines_without_the_endpoints_fall_back_to_approximate(engines, make_gateway):
    # fake engines answer neither /kv/summary nor /tokenize, even when declared builtin
    views = [backend(e) for e in engines[:2]]
    views = [type(v)(**{**v.__dict__, "engine": "builtin"}) for v in views]
    gw = make_gateway([model("m", views, routing="prefix_aware")], routing=PRECISE)
    time.sleep(0.3)
    assert not any(gw.state.router.resident.knows(v.id) for v in views)
    long_prompt = "shared context " * 100
    with gw.client() as c:
        picks = set()
        for suffix in ("a", "b", "c"):
            r = c.post("/v1/chat/completions", json=chat_body(
                messages=[{"role": "user", "content": long_prompt + suffix}], max_tokens=2))
            assert r.status_code == 200
            picks.add(r.json()["backend"])
    assert len(picks) == 1     # the approximate index still keeps the shared prefix together


def test_evicted_prefix_returns_to_where_it_was_sent():
    """Once a prefix is evicted everywhere, resident blocks tie at zero: the prompt goes back to
    the engine the gateway sent it to before, not to whichever is least loaded right now."""
    from types import SimpleNamespace

    from gateway.routing.load_book import LoadBook
    from gateway.routing.prefix_index import PrefixIndex
    from gateway.routing.strategies import PrefixAware, RouteContext

    book, resident = LoadBook(), ResidentBlocks()
    for b in ("a", "b"):
        resident.attach(b, 16)
    router = PrefixAware(book, PrefixIndex(10_000), block_chars=64, slack=2, resident=resident)
    backends = [SimpleNamespace(id="a", weight=1.0), SimpleNamespace(id="b", weight=1.0)]
    prompt, ids = "tenant seven's system prompt " * 20, list(range(5000, 5200))

    def route():
        return router.pick(backends, RouteContext(model="m", prompt_text=prompt, token_ids=ids)).id

    first = route()
    other = "b" if first == "a" else "a"
    resident.discard(first, token_block_hashes(ids, 16))   # evicted from the engine's cache
    book.acquire(first)                                    # and it is now the busier one
    assert resident.match(first, token_block_hashes(ids, 16)) == 0
    assert route() == first, f"sent to {other}: the tenant would be cached twice"
