"""RPM/TPM semantics, run against the in-memory and the Redis limiter alike."""
from __future__ import annotations

import random

import pytest

from gateway.limits import InMemoryRateLimiter, Limit, RedisRateLimiter, format_duration

KEY = Limit("key", "k1", rpm=3, tpm=1000)


async def test_rpm_rejects_fourth_request_with_retry_after_and_headers(limiter, clock):
    for i in range(3):
        decision = await limiter.acquire([KEY], tokens=10)
        assert decision.allowed
        assert decision.headers()["x-ratelimit-remaining-requests"] == str(2 - i)
    rejected = await limiter.acquire([KEY], tokens=10)
    assert not rejected.allowed
    assert rejected.reason == "rate_limit" and rejected.tripped == "key:rpm"
    # The first request's bucket leaves the window 61 s after it started (1 s buckets).
    assert rejected.retry_after == pytest.approx(61.0)
    headers = rejected.headers()
    assert headers["retry-after"] == "61"
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "970"
    assert headers["x-ratelimit-reset-requests"] == "1m1s"


async def test_window_slides(limiter, clock):
    for _ in range(3):
        assert (await limiter.acquire([KEY], tokens=1)).allowed
    clock.advance(30)
    assert not (await limiter.acquire([KEY], tokens=1)).allowed
    clock.advance(31)
    assert (await limiter.acquire([KEY], tokens=1)).allowed


async def test_all_counters_charged_or_none(limiter):
    team = Limit("team", "t1", tpm=50)
    assert (await limiter.acquire([KEY, team], tokens=40)).allowed
    rejected = await limiter.acquire([KEY, team], tokens=20)
    assert not rejected.allowed and rejected.tripped == "team:tpm"
    # The key's counters were not charged by the rejected call.
    alone = await limiter.acquire([KEY], tokens=0)
    assert alone.headers()["x-ratelimit-remaining-tokens"] == "960"
    assert alone.headers()["x-ratelimit-remaining-requests"] == "1"


async def test_global_and_model_caps(limiter):
    limits = [Limit("model", "m", rpm=100), Limit("global", "*", rpm=2)]
    assert (await limiter.acquire(limits, 1)).allowed
    assert (await limiter.acquire(limits, 1)).allowed
    rejected = await limiter.acquire([Limit("model", "other", rpm=100), limits[1]], 1)
    assert rejected.tripped == "global:rpm"


async def test_request_larger_than_tpm_is_too_large(limiter):
    rejected = await limiter.acquire([KEY], tokens=1001)
    assert not rejected.allowed and rejected.reason == "too_large"
    assert "key:tpm" in rejected.message


async def test_zero_limit_blocks(limiter):
    rejected = await limiter.acquire([Limit("key", "blocked", rpm=0)], tokens=1)
    assert not rejected.allowed and rejected.reason == "rate_limit"


async def test_retry_after_points_at_enough_freed_capacity(limiter, clock):
    lim = Limit("key", "k2", tpm=100)
    assert (await limiter.acquire([lim], 30)).allowed   # bucket t0
    clock.advance(10)
    assert (await limiter.acquire([lim], 30)).allowed   # bucket t0+10
    clock.advance(10)
    assert (await limiter.acquire([lim], 30)).allowed   # bucket t0+20
    rejected = await limiter.acquire([lim], 50)         # needs 40 freed: first two buckets
    assert rejected.retry_after == pytest.approx(61 - 20 + 10)
    clock.advance(rejected.retry_after)
    assert (await limiter.acquire([lim], 50)).allowed


async def test_reconcile_refunds_and_charges(limiter, clock):
    lim = Limit("key", "k3", tpm=100)
    first = await limiter.acquire([lim], 100)
    assert first.allowed and first.reservation.tokens == 100
    await limiter.reconcile(first.reservation, 30)
    await limiter.reconcile(first.reservation, 0)        # second call is a no-op
    assert not (await limiter.acquire([lim], 71)).allowed
    second = await limiter.acquire([lim], 10)
    assert second.allowed
    clock.advance(5)
    await limiter.reconcile(second.reservation, 50)      # used more than reserved
    assert (await limiter.acquire([lim], 0)).headers()["x-ratelimit-remaining-tokens"] == "20"
    await limiter.reconcile(None, 10)                    # nothing reserved: no error


async def test_negative_tokens_is_an_error(limiter):
    with pytest.raises(ValueError):
        await limiter.acquire([KEY], tokens=-1)


def test_bad_limit_values_rejected():
    with pytest.raises(ValueError):
        Limit("key", "x", rpm=-1)


def test_duration_format():
    assert format_duration(0.5) == "0.5s"
    assert format_duration(12) == "12s"
    assert format_duration(90) == "1m30s"


async def test_memory_and_redis_agree_on_random_traffic(redis_client, redis_prefix):
    """Same semantics: a random sequence of acquires, refunds and clock steps gives identical
    decisions from both implementations."""
    from tests.gateway.policies.conftest import FakeClock
    clocks = [FakeClock(), FakeClock()]
    limiters = [InMemoryRateLimiter(clock=clocks[0]),
                RedisRateLimiter(redis_client, prefix=redis_prefix, clock=clocks[1])]
    rng = random.Random(7)
    subjects = [[Limit("key", f"k{i}", rpm=8, tpm=400), Limit("team", "t", tpm=900)]
                for i in range(3)]
    held = [[], []]
    seen = set()
    for _ in range(300):
        limits, tokens = rng.choice(subjects), rng.randint(0, 120)
        step, settle = rng.choice([0, 0, 0.4, 3, 17]), rng.random() < 0.3
        outcomes = []
        for side in (0, 1):
            clocks[side].advance(step)
            if settle and held[side]:
                await limiters[side].reconcile(held[side].pop(0), tokens // 2)
            decision = await limiters[side].acquire(limits, tokens)
            if decision.allowed:
                held[side].append(decision.reservation)
            outcomes.append((decision.allowed, decision.tripped, decision.retry_after,
                             decision.headers()))
        assert outcomes[0] == outcomes[1]
        seen.add(outcomes[0][1])
    assert {None, "key:rpm", "key:tpm", "team:tpm"} <= seen   # every path was exercised
