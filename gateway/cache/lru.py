"""An in-process store bounded by entries, bytes and per-entry TTL, least recently used out
first (the exact cache's store without Redis, and the semantic index's entry book).

    store = LruStore(max_entries=10_000, max_bytes=256 << 20, clock=time.monotonic)
    store.put("k", value, size=len(value), ttl_s=60.0) -> [evicted keys]
    store.get("k")        # the value (now most recently used), None if absent or expired
    len(store), store.bytes
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class LruStore:
    __slots__ = ("_clock", "_items", "bytes", "max_bytes", "max_entries")

    def __init__(self, max_entries: int, max_bytes: int,
                 clock: Callable[[], float] = time.monotonic):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._clock = clock
        # key → (expiry, size, value), least recently used first
        self._items: OrderedDict[str, tuple[float, int, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return self.get(key, touch=False) is not None

    def get(self, key: str, touch: bool = True) -> Any:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= self._clock():
            self.pop(key)
            return None
        if touch:
            self._items.move_to_end(key)
        return item[2]

    def put(self, key: str, value: Any, size: int, ttl_s: float) -> list[str]:
        """Store (replacing any entry under `key`); the keys evicted to make room. An entry
        larger than the whole store is not kept (returned as evicted)."""
        self.pop(key)
        if size > self.max_bytes:
            return [key]
        self._items[key] = (self._clock() + ttl_s, size, value)
        self.bytes += size
        return self._evict()

    def pop(self, key: str) -> Any:
        item = self._items.pop(key, None)
        if item is None:
            return None
        self.bytes -= item[1]
        return item[2]

    def _evict(self) -> list[str]:
        evicted = []
        now = self._clock()
        # Expired entries at the cold end go first; then the least recently used.
        while self._items and (len(self._items) > self.max_entries or self.bytes > self.max_bytes
                               or next(iter(self._items.values()))[0] <= now):
            key, (_, size, _) = self._items.popitem(last=False)
            self.bytes -= size
            evicted.append(key)
        return evicted

    def keys(self) -> list[str]:
        return list(self._items)
