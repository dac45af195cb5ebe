"""Where exact-match answers live: this process's memory, or Redis (shared by every gateway).

    store = LocalExactStore(max_entries, max_bytes)          # no redis_url (or cache.shared off)
    store = RedisExactStore(client, "inferplane:cache:", max_entries, max_bytes)
    await store.get(key) -> CachedAnswer | None
    await store.put(key, answer, ttl_s)
    store.entries                                            # for the entries gauge

Both bound entries and bytes and evict the least recently used; every entry has its TTL. In
Redis each answer is a string key with a PX expiry; a sorted set orders keys by last use and
a hash holds each one's size and the running total, kept in step by two Lua scripts (one
round trip per lookup or store). A key that expired on its own stays counted until LRU order
reaches it (it is never touched again, so it drifts to the cold end first). A Redis outage
makes lookups miss and stores no-ops, logged once per outage: the cache never fails a request.
"""
from __future__ import annotations

import time

from gateway.cache.entry import CachedAnswer
from gateway.cache.lru import LruStore
from gateway.limits.outage import STORE_ERRORS, OutageLog

GET = """
local v = redis.call('GET', KEYS[1])
if v then redis.call('ZADD', KEYS[2], 'XX', ARGV[1], KEYS[1]) end
return v
"""

PUT = """
local key, lru, sizes = KEYS[1], KEYS[2], KEYS[3]
local old = redis.call('HGET', sizes, key)
if old then redis.call('HINCRBY', sizes, '#bytes', -tonumber(old)) end
redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', lru, ARGV[3], key)
redis.call('HSET', sizes, key, #ARGV[1])
local total = redis.call('HINCRBY', sizes, '#bytes', #ARGV[1])
local n = redis.call('ZCARD', lru)
while n > tonumber(ARGV[4]) or total > tonumber(ARGV[5]) do
  local oldest = redis.call('ZPOPMIN', lru)
  if #oldest == 0 then break end
  local size = redis.call('HGET', sizes, oldest[1])
  redis.call('HDEL', sizes, oldest[1])
  redis.call('DEL', oldest[1])
  if size then total = redis.call('HINCRBY', sizes, '#bytes', -tonumber(size)) end
  n = n - 1
end
return n
"""


class LocalExactStore:
    def __init__(self, max_entries: int, max_bytes: int, clock=time.monotonic):
        self._lru = LruStore(max_entries, max_bytes, clock)

    @property
    def entries(self) -> int:
        return len(self._lru)

    async def get(self, key: str) -> CachedAnswer | None:
        return self._lru.get(key)

    async def put(self, key: str, answer: CachedAnswer, ttl_s: float) -> None:
        self._lru.put(key, answer, len(answer), ttl_s)

    async def close(self) -> None:
        return None


class RedisExactStore:
    def __init__(self, client, prefix: str, max_entries: int, max_bytes: int):
        self.client = client
        self.prefix = prefix
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._lru_key, self._sizes_key = prefix + "lru", prefix + "sizes"
        self._get = client.register_script(GET)
        self._put = client.register_script(PUT)
        self._outage = OutageLog("response cache", "fail_open")
        self.entries = 0     # as of this process's last store

    async def get(self, key: str) -> CachedAnswer | None:
        try:
            raw = await self._get(keys=[self.prefix + "e:" + key, self._lru_key],
                                  args=[time.time()])
        except STORE_ERRORS as exc:
            self._outage.failed(exc)
            return None
        self._outage.succeeded()
        return None if raw is None else CachedAnswer.decode(raw)

    async def put(self, key: str, answer: CachedAnswer, ttl_s: float) -> None:
        try:
            self.entries = int(await self._put(
                keys=[self.prefix + "e:" + key, self._lru_key, self._sizes_key],
                args=[answer.encode(), max(1, int(ttl_s * 1000)), time.time(),
                      self.max_entries, self.max_bytes]))
        except STORE_ERRORS as exc:
            self._outage.failed(exc)
            return
        self._outage.succeeded()

    async def close(self) -> None:
        await self.client.aclose()
