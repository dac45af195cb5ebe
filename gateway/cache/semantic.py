"""The semantic cache: answers found by the meaning of the last user message, nearest
neighbour by cosine similarity in a usearch HNSW index per partition (a partition is one
tenant, model, version and the rest of the request: a paraphrase only ever matches within it).

    index = SemanticIndex(max_entries, max_bytes)              # this process only
    index = SemanticIndex(max_entries, max_bytes, feed=RedisSemanticFeed(client, prefix, n))
    await index.search(partition, vector, threshold) -> (answer, similarity) | None
    await index.add(partition, vector, answer, ttl_s)

Entries are bounded like the exact store (LRU by entries and bytes, TTL each); an evicted
entry leaves its partition's index, and an empty index is dropped. With Redis, every entry
is also appended to a capped Redis stream (vector, answer, expiry); each gateway reads the
stream's new entries into its own index before it searches, so an answer stored by one
gateway is found by all (Redis 7 without a vector-search module holds the data, each
process the ANN index).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
from usearch.index import Index

from gateway.cache.entry import CachedAnswer
from gateway.cache.lru import LruStore
from gateway.limits.outage import STORE_ERRORS, OutageLog


@dataclass(frozen=True, slots=True)
class _Entry:
    partition: str
    label: int          # the vector's key in the partition's usearch index
    answer: CachedAnswer


class SemanticIndex:
    def __init__(self, max_entries: int, max_bytes: int, feed: RedisSemanticFeed | None = None,
                 clock=time.time):
        self._book = LruStore(max_entries, max_bytes, clock)   # entry id → _Entry
        self._indexes: dict[str, Index] = {}
        self._ids: dict[str, dict[int, str]] = {}     # partition → label → entry id
        self._where: dict[str, tuple[str, int]] = {}  # entry id → (partition, label)
        self._labels = itertools.count(1)
        self._local_ids = itertools.count(1)
        self._clock = clock
        self.feed = feed

    @property
    def entries(self) -> int:
        return len(self._book)

    async def search(self, partition: str, vector: np.ndarray, threshold: float
                     ) -> tuple[CachedAnswer, float] | None:
        if self.feed is not None:
            for entry_id, part, vec, answer, expires in await self.feed.read_new():
                self._insert(entry_id, part, vec, answer, expires - self._clock())
        index = self._indexes.get(partition)
        if index is None or len(index) == 0:
            return None
        found = index.search(vector, 1)
        if len(found.keys) == 0:
            return None
        similarity = 1.0 - float(found.distances[0])
        entry_id = self._ids[partition].get(int(found.keys[0]))
        entry = None if entry_id is None else self._book.get(entry_id)
        if entry is None:
            if entry_id is not None:   # expired: out of the index as well
                self._forget(entry_id, partition, int(found.keys[0]))
            return None
        return (entry.answer, similarity) if similarity >= threshold else None

    async def add(self, partition: str, vector: np.ndarray, answer: CachedAnswer,
                  ttl_s: float) -> None:
        entry_id = None
        if self.feed is not None:
            entry_id = await self.feed.append(partition, vector, answer, self._clock() + ttl_s)
        self._insert(entry_id or f"local-{next(self._local_ids)}", partition, vector, answer,
                     ttl_s)

    def _insert(self, entry_id: str, partition: str, vector: np.ndarray, answer: CachedAnswer,
                ttl_s: float) -> None:
        if ttl_s <= 0 or entry_id in self._book:
            return
        index = self._indexes.get(partition)
        if index is None:
            index = self._indexes[partition] = Index(ndim=len(vector), metric="cos", dtype="f32")
            self._ids[partition] = {}
        elif index.ndim != len(vector):   # another embedding model's vectors: not comparable
            return
        label = next(self._labels)
        index.add(label, vector)
        self._ids[partition][label] = entry_id
        self._where[entry_id] = (partition, label)
        size = len(answer) + vector.nbytes + len(partition) + 64
        for evicted in self._book.put(entry_id, _Entry(partition, label, answer), size, ttl_s):
            self._drop(evicted)

    def _drop(self, entry_id: str) -> None:
        """An entry the book let go of (evicted or expired): out of its index too."""
        where = self._where.get(entry_id)
        if where is not None:
            self._forget(None, *where)

    def _forget(self, entry_id: str | None, partition: str, label: int) -> None:
        if entry_id is not None:
            self._book.pop(entry_id)
        known = self._ids[partition].pop(label, None)
        self._where.pop(known, None)
        index = self._indexes[partition]
        index.remove(label)
        if not self._ids[partition]:
            del self._indexes[partition], self._ids[partition]


class RedisSemanticFeed:
    """Semantic entries in a capped Redis stream (`<prefix>semantic`), read incrementally."""

    def __init__(self, client, prefix: str, max_entries: int):
        self.client = client
        self.stream = prefix + "semantic"
        self.max_entries = max_entries
        self._last = "0"
        self._outage = OutageLog("semantic cache", "fail_open")

    async def append(self, partition: str, vector: np.ndarray, answer: CachedAnswer,
                     expires: float) -> str | None:
        try:
            entry_id = await self.client.xadd(self.stream, {
                "p": partition, "v": vector.astype(np.float32).tobytes(),
                "a": answer.encode(), "e": repr(expires)},
                maxlen=self.max_entries, approximate=True)
        except STORE_ERRORS as exc:
            self._outage.failed(exc)
            return None
        self._outage.succeeded()
        return entry_id.decode() if isinstance(entry_id, bytes) else entry_id

    async def read_new(self) -> list[tuple[str, str, np.ndarray, CachedAnswer, float]]:
        """Entries appended since the last read (by any gateway), oldest first."""
        try:
            reply = await self.client.xread({self.stream: self._last}, count=1000)
        except STORE_ERRORS as exc:
            self._outage.failed(exc)
            return []
        self._outage.succeeded()
        out = []
        for _, messages in reply or ():
            for raw_id, fields in messages:
                entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
                self._last = entry_id
                answer = CachedAnswer.decode(fields.get(b"a", b""))
                if answer is None:
                    continue
                out.append((entry_id, fields[b"p"].decode(),
                            np.frombuffer(fields[b"v"], dtype=np.float32), answer,
                            float(fields[b"e"])))
        return out
