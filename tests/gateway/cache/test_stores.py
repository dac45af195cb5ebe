"""Exact stores: the process-local one and the Redis one (real Redis): TTL, LRU, bytes."""
from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.cache.entry import CachedAnswer
from gateway.cache.stores import LocalExactStore, RedisExactStore

REDIS_URL = "redis://127.0.0.1:6379/0"


def answer(i: int, size: int = 10) -> CachedAnswer:
    return CachedAnswer.json(str(i).encode() * size, "served")


def test_an_answer_round_trips_through_its_encoding():
    stream = CachedAnswer.sse([b'data: {"a":1}\n\n', b"data: [DONE]\n\n"], "m")
    assert CachedAnswer.decode(stream.encode()) == stream
    assert stream.events() == [b'data: {"a":1}\n\n', b"data: [DONE]\n\n"]
    assert CachedAnswer.decode(b"garbage") is None


async def test_the_local_store_keeps_what_fits():
    store = LocalExactStore(max_entries=2, max_bytes=1 << 20)
    for i in range(3):
        await store.put(f"k{i}", answer(i), ttl_s=60)
    assert await store.get("k0") is None and await store.get("k2") == answer(2)
    assert store.entries == 2


@pytest.fixture
async def redis_store():
    prefix = f"test-cache-{uuid.uuid4().hex}:"
    client = aioredis.Redis.from_url(REDIS_URL)
    store = RedisExactStore(client, prefix, max_entries=3, max_bytes=1000)
    yield store
    keys = [k async for k in client.scan_iter(prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def test_redis_keeps_answers_with_their_ttl(redis_store):
    await redis_store.put("a", answer(1), ttl_s=0.2)
    assert await redis_store.get("a") == answer(1)
    await asyncio.sleep(0.3)
    assert await redis_store.get("a") is None


async def test_redis_evicts_the_least_recently_used(redis_store):
    for i in range(3):
        await redis_store.put(f"k{i}", answer(i), ttl_s=60)
    assert await redis_store.get("k0") is not None     # k0 is now more recent than k1
    await redis_store.put("k3", answer(3), ttl_s=60)
    assert await redis_store.get("k1") is None
    assert await redis_store.get("k0") is not None and redis_store.entries == 3


async def test_redis_bounds_the_bytes(redis_store):
    for i in range(3):
        await redis_store.put(f"b{i}", answer(i, size=400), ttl_s=60)
    assert await redis_store.get("b0") is None      # 3 x ~410 bytes > 1000
    sizes = await redis_store.client.hget(redis_store.prefix + "sizes", "#bytes")
    assert int(sizes) <= 1000


async def test_a_dead_redis_misses_instead_of_failing():
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    store = RedisExactStore(client, "x:", 10, 1000)
    await store.put("a", answer(1), ttl_s=60)
    assert await store.get("a") is None
    await client.aclose()
