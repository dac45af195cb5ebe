"""Approximate prefix-cache index: which backend has recently seen which prompt blocks.

A prompt's raw text is cut into fixed-size character blocks; each block's hash chains the
previous one (like an engine's block hash), so block i matches only if the whole prefix up to
i matches. Each backend keeps an LRU of hashes bounded to `capacity` blocks, mimicking an
engine's cache eviction.
"""
from __future__ import annotations

from collections import OrderedDict

import xxhash


def block_hashes(text: str, block_chars: int) -> list[int]:
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(text) - block_chars + 1, block_chars):
        h = xxhash.xxh3_64()
        h.update(parent.to_bytes(8, "little"))
        h.update(text[start:start + block_chars].encode("utf-8", "surrogatepass"))
        parent = h.intdigest()
        hashes.append(parent)
    return hashes


class PrefixIndex:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._blocks: dict[str, OrderedDict[int, None]] = {}

    def match(self, backend_id: str, hashes: list[int]) -> int:
        """Number of leading blocks of `hashes` resident on the backend."""
        blocks = self._blocks.get(backend_id)
        if not blocks:
            return 0
        matched = 0
        for h in hashes:
            if h not in blocks:
                break
            matched += 1
        return matched

    def insert(self, backend_id: str, hashes: list[int]) -> None:
        blocks = self._blocks.setdefault(backend_id, OrderedDict())
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def forget(self, backend_id: str) -> None:
        self._blocks.pop(backend_id, None)
