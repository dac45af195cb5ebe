"""Stored responses: bounded in memory (count, age), shared through real Redis, per owner."""
import asyncio
import uuid

from gateway.apis.responses.store import (MemoryResponseStore, RedisResponseStore, StoredResponse,
                                           response_store)


def _record(i: int, owner: str = "k1") -> StoredResponse:
    return StoredResponse({"id": f"resp_{i}"}, [{"role": "user", "content": str(i)}], owner)


def test_memory_store_evicts_oldest_beyond_count_and_expires_by_age():
    now = [0.0]
    store = MemoryResponseStore(max_items=2, ttl_s=10, clock=lambda: now[0])

    async def run():
        for i in range(3):
            await store.put(_record(i))
        assert await store.get("resp_0", "k1") is None and len(store) == 2
        assert (await store.get("resp_2", "k1")).conversation[0]["content"] == "2"
        now[0] = 11
        assert await store.get("resp_2", "k1") is None and len(store) == 0

    asyncio.run(run())


def test_memory_store_is_per_owner_and_deletes():
    store = MemoryResponseStore()

    async def run():
        await store.put(_record(1))
        assert await store.get("resp_1", "k2") is None
        assert not await store.delete("resp_1", "k2")
        assert await store.delete("resp_1", "k1")
        assert await store.get("resp_1", "k1") is None

    asyncio.run(run())


def test_redis_store_round_trip_ttl_and_owner():
    prefix = f"test:{uuid.uuid4().hex}:"

    async def run():
        store = RedisResponseStore("redis://127.0.0.1:6379/0", ttl_s=0.3, prefix=prefix)
        other = RedisResponseStore("redis://127.0.0.1:6379/0", ttl_s=0.3, prefix=prefix)
        try:
            await store.put(_record(1))
            got = await other.get("resp_1", "k1")      # another replica reads it
            assert got == _record(1)
            assert await other.get("resp_1", "k2") is None
            await asyncio.sleep(0.5)
            assert await store.get("resp_1", "k1") is None
            await store.put(_record(2))
            assert await other.delete("resp_2", "k1") and not await store.delete("resp_2", "k1")
        finally:
            await store.aclose()
            await other.aclose()

    asyncio.run(run())


def test_redis_is_used_when_the_gateway_has_it():
    assert isinstance(response_store(None, max_items=3), MemoryResponseStore)
    shared = response_store("redis://127.0.0.1:6379/0")
    assert isinstance(shared, RedisResponseStore)
    asyncio.run(shared.aclose())
