"""Distribution and stickiness per routing strategy."""
from collections import Counter

import pytest

from common.metric_names import Metric
from common.vocabulary import RoutingStrategy
from engine_adapter.base import LoadView
from gateway.observability.metrics import GatewayMetrics
from gateway.routing import RouteContext, Router
from gateway.settings import RoutingSettings
from registry.snapshot import BackendView
from tests.gateway.conftest import backend, chat_body, model


def bv(i: int, weight: float = 1.0, state: str = "ready", adapters=()) -> BackendView:
    return BackendView(id=f"b{i}", url="http://127.0.0.1:1/v1", engine="vllm", served_model="x",
                       gpu=None, weight=weight, tier="hot", state=state, adapters=adapters,
                       version="v1")


def router(strategy: str, **kw) -> Router:
    return Router(RoutingSettings(strategy=strategy, **kw), GatewayMetrics())


def picks(r: Router, backends, n: int, ctx_factory=lambda i: RouteContext("m")) -> Counter:
    mv = model("m", backends, routing="")
    return Counter(r.pick(mv, mv.backends, ctx_factory(i)).id for i in range(n))


def test_every_strategy_in_the_vocabulary_has_a_picker_and_picks():
    r = router("least_loaded")
    assert set(r.strategies) == set(RoutingStrategy)
    for strategy in RoutingStrategy:
        mv = model("m", [bv(0), bv(1)], routing=strategy.value)
        assert r.strategy_name(mv) == strategy
        assert r.pick(mv, mv.backends, RouteContext("m", session_key="s")).id in {"b0", "b1"}


def test_a_typod_strategy_is_refused_by_the_settings():
    with pytest.raises(ValueError, match="least_loaded"):
        RoutingSettings(strategy="least_loadd")


def test_round_robin_is_even():
    assert picks(router("round_robin"), [bv(0), bv(1), bv(2)], 30) == {"b0": 10, "b1": 10,
                                                                      "b2": 10}


def test_weighted_follows_capacity_weight():
    assert picks(router("weighted"), [bv(0, 3.0), bv(1, 1.0)], 40) == {"b0": 30, "b1": 10}


def test_least_loaded_counts_inflight_and_engine_queue():
    r = router("least_loaded")
    r.book.acquire("b0")
    r.book.report("b1", LoadView(waiting=3))
    assert picks(r, [bv(0), bv(1), bv(2)], 1) == {"b2": 1}


def test_p2c_never_picks_the_most_loaded_of_two():
    r = router("p2c")
    for _ in range(10):
        r.book.acquire("b0")
    assert picks(r, [bv(0), bv(1)], 50) == {"b1": 50}


def test_unroutable_backends_are_filtered():
    r = router("round_robin")
    assert picks(r, [bv(0, state="down"), bv(1), bv(2, state="draining")], 5) == {"b1": 5}
    mv = model("m", [bv(0, state="starting")])
    assert r.pick(mv, mv.backends, RouteContext("m")) is None


def test_prefix_aware_keeps_a_prefix_on_one_backend_until_it_is_busy():
    r = router("prefix_aware", prefix_block_chars=16, prefix_load_slack=2)
    backends = [bv(0), bv(1), bv(2)]
    doc = "shared system prompt " * 20

    def ctx(i):
        return RouteContext("m", prompt_text=doc + f"question {i}")
    first = picks(r, backends, 1, ctx)
    hot = next(iter(first))
    assert picks(r, backends, 10, ctx) == {hot: 10}
    for _ in range(3):                     # the hot backend gets busy beyond the slack
        r.book.acquire(hot)
    spread = picks(r, backends, 1, ctx)
    assert hot not in spread


def test_prefix_aware_spreads_distinct_prompts():
    r = router("prefix_aware", prefix_block_chars=16)
    backends = [bv(0), bv(1)]
    mv = model("m", backends, routing="")
    chosen = set()
    for i in range(2):
        ctx = RouteContext("m", prompt_text=f"{i}: a prompt that shares no first block " * 4)
        b = r.pick(mv, mv.backends, ctx)
        r.book.acquire(b.id)                # stays in flight
        chosen.add(b.id)
    assert chosen == {"b0", "b1"}


def test_session_affinity_is_sticky_and_moves_when_backend_leaves():
    r = router("session_affinity")
    backends = [bv(0), bv(1), bv(2)]
    counts = picks(r, backends, 20, lambda i: RouteContext("m", session_key="alice"))
    assert len(counts) == 1
    home = next(iter(counts))
    rest = [b if b.id != home else bv(int(home[1]), state="down") for b in backends]
    moved = picks(r, rest, 5, lambda i: RouteContext("m", session_key="alice"))
    assert len(moved) == 1 and home not in moved
    users = picks(r, backends, 300, lambda i: RouteContext("m", session_key=f"user{i}"))
    assert len(users) == 3 and min(users.values()) > 50


def test_lora_affinity_prefers_backends_with_the_adapter():
    r = router("lora_affinity", prefix_load_slack=2)
    backends = [bv(0), bv(1, adapters=("sql",)), bv(2)]
    ctx = lambda i: RouteContext("m", adapter="sql")
    assert picks(r, backends, 5, ctx) == {"b1": 5}
    r.book.report("b2", LoadView(adapters=frozenset({"sql"})))
    r.book.acquire("b1")
    assert picks(r, backends, 1, ctx) == {"b2": 1}


def test_adapter_requests_never_go_to_engines_without_the_adapter():
    """An engine without the adapter would answer 404: a busy holder still gets the request,
    whatever the strategy, and a request without an adapter ignores adapters."""
    for strategy in ("lora_affinity", "round_robin", "least_loaded", "prefix_aware"):
        r = router(strategy, prefix_load_slack=2)
        backends = [bv(0), bv(1, adapters=("sql",)), bv(2)]
        for _ in range(10):
            r.book.acquire("b1")
        sql = picks(r, backends, 6, lambda i: RouteContext("m", prompt_text="q", adapter="sql"))
        assert sql == {"b1": 6}, strategy
        plain = picks(r, backends, 6, lambda i: RouteContext("m", prompt_text="q"))
        assert "b1" not in plain or strategy == "round_robin", (strategy, plain)
        unknown = picks(r, backends, 3, lambda i: RouteContext("m", prompt_text="q", adapter="x"))
        assert sum(unknown.values()) == 3   # none holds it: the load path decides, not routing


def test_round_robin_over_http(make_gateway, engines):
    gw = make_gateway([model("m", [backend(e) for e in engines], routing="round_robin")])
    with gw.client() as c:
        served = Counter(c.post("/v1/chat/completions", json=chat_body(max_tokens=1)).json()[
            "backend"] for _ in range(9))
    assert served == {"e0": 3, "e1": 3, "e2": 3}
    with gw.client() as c:
        text = c.get("/metrics").text
    assert f'{Metric.ROUTING_DECISIONS.total}{{backend="e0",model="m",strategy="round_robin"}} 3.0' \
        in text


def test_engine_load_is_polled(make_gateway, engines):
    import time
    gw = make_gateway([model("m", [backend(engines[0])])],
                      routing={"load_poll_interval_s": 0.1})
    deadline = time.monotonic() + 5
    while "e0" not in gw.state.router.book.engine and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.state.router.book.engine["e0"].kv_usage == pytest.approx(0.1)


def test_precise_prefix_compares_matched_tokens_across_block_sizes():
    """A vLLM backend (128-token blocks) holding one block of the prompt beats a builtin engine
    (16-token blocks) holding three: 128 cached tokens against 48."""
    from gateway.routing.resident import token_block_hashes
    r = router("prefix_aware")
    tokens = list(range(300))
    r.resident.attach("b0", 16)
    r.resident.attach("b1", 128)
    r.resident._backends["b0"].hashes.update(token_block_hashes(tokens, 16)[:3])
    r.resident._backends["b1"].hashes.update(token_block_hashes(tokens, 128)[:1])
    mv = model("m", [bv(0), bv(1)], routing="")
    ctx = RouteContext("m", token_ids=tokens)
    assert r.pick(mv, mv.backends, ctx).id == "b1"
    assert ctx.block_tokens == 128 and ctx.prefix_matched == 1
