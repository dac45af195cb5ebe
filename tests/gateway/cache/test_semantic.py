"""The semantic index: nearest neighbour within a partition, threshold, eviction, and the
Redis feed that shares entries between gateways (real Redis)."""
from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis.asyncio as aioredis

from gateway.cache.entry import CachedAnswer
from gateway.cache.semantic import RedisSemanticFeed, SemanticIndex

REDIS_URL = "redis://127.0.0.1:6379/0"


def unit(*values) -> np.ndarray:
    v = np.zeros(8, dtype=np.float32)
    v[:len(values)] = values
    return v / np.linalg.norm(v)


ANSWER = CachedAnswer.json(b'{"choices": []}', "served")


async def test_a_close_vector_hits_and_a_far_one_misses():
    index = SemanticIndex(100, 1 << 20)
    await index.add("p", unit(1, 0.1), ANSWER, ttl_s=60)
    hit = await index.search("p", unit(1, 0.12), threshold=0.95)
    assert hit is not None and hit[0] == ANSWER and hit[1] > 0.99
    assert await index.search("p", unit(0.2, 1), threshold=0.95) is None


async def test_partitions_never_share_answers():
    index = SemanticIndex(100, 1 << 20)
    await index.add("team-a", unit(1), ANSWER, ttl_s=60)
    assert await index.search("team-b", unit(1), threshold=0.5) is None


async def test_evicted_and_expired_entries_leave_the_index():
    now = [0.0]
    index = SemanticIndex(2, 1 << 20, clock=lambda: now[0])
    for i in range(3):
        await index.add("p", unit(1, i), CachedAnswer.json(str(i).encode(), "s"), ttl_s=10)
    assert index.entries == 2
    assert await index.search("p", unit(1, 0), threshold=0.9999) is None   # evicted
    now[0] = 11.0
    assert await index.search("p", unit(1, 2), threshold=0.5) is None      # expired
    assert await index.search("p", unit(1, 1), threshold=0.5) is None
    assert index.entries == 0 and index._indexes == {}


@pytest.fixture
async def redis_prefix():
    prefix = f"test-cache-{uuid.uuid4().hex}:"
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client, prefix
    await client.delete(prefix + "semantic")
    await client.aclose()


async def test_an_entry_added_by_one_gateway_is_found_by_another(redis_prefix):
    client, prefix = redis_prefix
    one = SemanticIndex(100, 1 << 20, feed=RedisSemanticFeed(client, prefix, 100))
    two = SemanticIndex(100, 1 << 20, feed=RedisSemanticFeed(client, prefix, 100))
    await one.add("p", unit(1, 0.3), ANSWER, ttl_s=60)
    hit = await two.search("p", unit(1, 0.31), threshold=0.95)
    assert hit is not None and hit[0] == ANSWER
    assert two.entries == 1
    await two.search("p", unit(1), threshold=0.95)   # read again: no duplicate
    assert two.entries == 1
