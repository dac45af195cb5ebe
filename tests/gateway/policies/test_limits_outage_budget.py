"""Redis outage fail modes and token estimates."""
from __future__ import annotations

import logging
import time

import pytest
import redis.asyncio as aioredis
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from gateway.limits import Limit, RedisRateLimiter, TokenEstimator, reservation_tokens

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
