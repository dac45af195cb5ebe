"""The in-process store: TTL, entry and byte bounds, least recently used out first."""
from __future__ import annotations

from gateway.cache.lru import LruStore


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_entries_expire_after_their_ttl():
    clock = Clock()
    store = LruStore(10, 1000, clock)
    store.put("a", "A", 1, ttl_s=5)
    clock.now = 4.9
    assert store.get("a") == "A"
    clock.now = 5.0
    assert store.get("a") is None and len(store) == 0 and store.bytes == 0


def test_the_least_recently_used_goes_first_past_max_entries():
    store = LruStore(2, 1000, Clock())
    store.put("a", 1, 1, 60)
    store.put("b", 2, 1, 60)
    assert store.get("a") == 1            # a is now the most recent
    assert store.put("c", 3, 1, 60) == ["b"]
    assert store.keys() == ["a", "c"]


def test_bytes_are_bounded_and_an_oversized_entry_is_not_kept():
    store = LruStore(100, 10, Clock())
    store.put("a", 1, 4, 60)
    store.put("b", 2, 4, 60)
    assert store.put("c", 3, 4, 60) == ["a"] and store.bytes == 8
    assert store.put("huge", 4, 11, 60) == ["huge"] and "huge" not in store
    store.put("b", 5, 1, 60)              # replacing frees the old size
    assert store.bytes == 5 and store.get("b") == 5
