"""Stored Responses: what `previous_response_id`, `GET` and `DELETE /v1/responses/{id}` read.

A record is the Response object as the client received it plus the chat conversation that led
to it (the turns before, this turn's input and the model's output as chat messages), so the
next turn's request is that conversation + its own input. Records belong to the key that made
them: another key reads 404, as if the id did not exist.

    store = response_store(settings.redis_url, max_items=10_000, ttl_s=3600)
    await store.put(StoredResponse(response, conversation, owner=principal.key_id))
    record = await store.get(response_id, owner=principal.key_id)     # None: missing/expired
    deleted = await store.delete(response_id, owner=principal.key_id)

Embedded (`inferplane up`): in memory, bounded by count (oldest evicted first) and age.
With Redis configured: one key per response with a TTL, so any gateway replica continues a
conversation another replica started; Redis's own eviction bounds memory.
"""
from __future__ import annotations

import abc
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass

import orjson

DEFAULT_MAX_ITEMS = 10_000
DEFAULT_TTL_S = 24 * 3600.0


@dataclass(frozen=True)
class StoredResponse:
    response: dict            # the Response object (id inside)
    conversation: list[dict]  # chat messages up to and including this response's output
    owner: str                # key id of the principal that created it

    @property
    def id(self) -> str:
        return self.response["id"]


class ResponseStore(abc.ABC):
    """Where responses created with `store: true` are kept."""

    @abc.abstractmethod
    async def put(self, record: StoredResponse) -> None: ...

    @abc.abstractmethod
    async def get(self, response_id: str, owner: str) -> StoredResponse | None: ...

    @abc.abstractmethod
    async def delete(self, response_id: str, owner: str) -> bool: ...

    async def aclose(self) -> None:
        return None


class MemoryResponseStore(ResponseStore):
    """Bounded in-process store: at most `max_items`, each for at most `ttl_s` seconds."""

    def __init__(self, max_items: int = DEFAULT_MAX_ITEMS, ttl_s: float = DEFAULT_TTL_S,
                 clock=time.monotonic):
        self.max_items = max_items
        self.ttl_s = ttl_s
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, StoredResponse]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, record: StoredResponse) -> None:
        self._expire()
        self._items[record.id] = (self._clock() + self.ttl_s, record)
        self._items.move_to_end(record.id)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        self._expire()
        entry = self._items.get(response_id)
        return entry[1] if entry is not None and entry[1].owner == owner else None

    async def delete(self, response_id: str, owner: str) -> bool:
        if await self.get(response_id, owner) is None:
            return False
        del self._items[response_id]
        return True

    def _expire(self) -> None:
        # Insertion order is expiry order (one TTL for all), so expired entries are a prefix.
        now = self._clock()
        while self._items:
            first = next(iter(self._items.values()))
            if first[0] > now:
                return
            self._items.popitem(last=False)


class RedisResponseStore(ResponseStore):
    """One Redis string per response (`<prefix><id>`), expiring after `ttl_s`."""

    def __init__(self, url: str, ttl_s: float = DEFAULT_TTL_S,
                 prefix: str = "inferplane:response:"):
        import redis.asyncio as aioredis

        self.ttl_s = ttl_s
        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(url)

    async def put(self, record: StoredResponse) -> None:
        await self._redis.set(self.prefix + record.id, orjson.dumps(asdict(record)),
                              px=max(1, int(self.ttl_s * 1000)))

    async def get(self, response_id: str, owner: str) -> StoredResponse | None:
        raw = await self._redis.get(self.prefix + response_id)
        if raw is None:
            return None
        record = StoredResponse(**orjson.loads(raw))
        return record if record.owner == owner else None

    async def delete(self, response_id: str, owner: str) -> bool:
        if await self.get(response_id, owner) is None:
            return False
        return bool(await self._redis.delete(self.prefix + response_id))

    async def aclose(self) -> None:
        await self._redis.aclose()


def response_store(redis_url: str | None, max_items: int = DEFAULT_MAX_ITEMS,
                   ttl_s: float = DEFAULT_TTL_S) -> ResponseStore:
    """Redis-backed when the gateway has Redis (shared by replicas), else in memory."""
    if redis_url:
        return RedisResponseStore(redis_url, ttl_s)
    return MemoryResponseStore(max_items, ttl_s)
