"""Redis outage fail modes, USD budgets and token estimates."""
from __future__ import annotations

import logging
import time

import pytest
import redis.asyncio as aioredis
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from gateway.limits import (
    Budget, InMemorySpendTracker, Limit, Prices, RedisRateLimiter, RedisSpendTracker,
    TokenEstimator, reservation_tokens,
)

LIMITS = [Limit("key", "k", rpm=10, tpm=100)]


async def test_fail_open_admits_and_logs_once(closed_port_url, caplog):
    limiter = RedisRateLimiter(closed_port_url, fail_mode="fail_open")
    caplog.set_level(logging.ERROR, logger="gateway.limits")
    started = time.monotonic()
    for _ in range(5):
        decision = await limiter.acquire(LIMITS, 10)
        assert decision.allowed and decision.reservation is None
    await limiter.reconcile(decision.reservation, 10)
    assert time.monotonic() - started < 5            # fails fast, no hang
    assert limiter.outage.down and limiter.outage.failures == 5
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    await limiter.close()


async def test_fail_closed_rejects_without_raising(closed_port_url):
    limiter = RedisRateLimiter(closed_port_url, fail_mode="fail_closed")
    decision = await limiter.acquire(LIMITS, 10)
    assert not decision.allowed and decision.reason == "unavailable"
    assert decision.headers()["retry-after"] == "1"
    await limiter.close()


async def test_recovery_is_logged(redis_prefix, closed_port_url, caplog):
    client = aioredis.Redis.from_url(closed_port_url, socket_connect_timeout=0.5)
    limiter = RedisRateLimiter(client, prefix=redis_prefix)
    caplog.set_level(logging.WARNING, logger="gateway.limits")
    assert (await limiter.acquire(LIMITS, 1)).reservation is None
    assert limiter.outage.down
    client.connection_pool.connection_kwargs["port"] = 6379     # the store comes back
    client.connection_pool.reset()
    assert (await limiter.acquire(LIMITS, 1)).reservation is not None
    assert not limiter.outage.down
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    await client.aclose()


def test_unknown_fail_mode_is_rejected():
    with pytest.raises(ValueError):
        RedisRateLimiter("redis://127.0.0.1:6379", fail_mode="maybe")


@pytest.fixture(params=["memory", "redis"])
async def spend(request, redis_client, redis_prefix):
    if request.param == "memory":
        return InMemorySpendTracker()
    return RedisSpendTracker(redis_client, prefix=redis_prefix)


async def test_budget_rejects_once_spent(spend):
    prices = Prices(in_per_1k=0.5, out_per_1k=1.5)
    budgets = [Budget("key", "k", max_usd=1.0), Budget("team", "t", max_usd=None)]
    assert await spend.check(budgets) is None
    await spend.record(budgets, prices.cost(1000, 200))       # 0.5 + 0.3
    assert await spend.spent(budgets[0]) == pytest.approx(0.8)
    assert await spend.check(budgets) is None
    await spend.record(budgets, prices.cost(0, 200))          # total 1.1
    rejected = await spend.check(budgets)
    assert rejected is not None and rejected.reason == "budget"
    assert rejected.tripped == "key:budget"
    assert await spend.spent(budgets[1]) == pytest.approx(1.1)   # team spend tracked too


async def test_budget_seed(spend):
    budget = Budget("team", "t2", max_usd=5.0)
    await spend.seed(budget, 5.0)
    assert (await spend.check([budget])).reason == "budget"


async def test_budget_store_down_modes(closed_port_url):
    budgets = [Budget("key", "k", max_usd=1.0)]
    open_tracker = RedisSpendTracker(closed_port_url, fail_mode="fail_open")
    closed_tracker = RedisSpendTracker(closed_port_url, fail_mode="fail_closed")
    assert await open_tracker.check(budgets) is None
    assert (await closed_tracker.check(budgets)).reason == "unavailable"
    await open_tracker.record(budgets, 1.0)                   # swallowed, no raise
    await open_tracker.close()
    await closed_tracker.close()


def test_token_estimates():
    chars = TokenEstimator()
    assert chars.count_text("abcdefgh") == 2 and chars.count_text("abcdefghi") == 3
    messages = [{"role": "user", "content": "abcd"},
                {"role": "user", "content": [{"type": "text", "text": "abcdefgh"},
                                             {"type": "image_url", "image_url": {}}]}]
    assert chars.count_messages(messages) == (4 + 1) + (4 + 2)   # overhead + text
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    words = TokenEstimator(tok)
    assert words.count_text("hello world hello unknownword") == 4
    assert reservation_tokens(100, 50, default_max_tokens=256) == 150
    assert reservation_tokens(100, None, default_max_tokens=256, context_length=200) == 200
