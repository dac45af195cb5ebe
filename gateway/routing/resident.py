"""Precise prefix state: the KV blocks each builtin engine reports resident (GET /kv/summary).

The engine names a cached block by a chained hash of token ids (see its `hash` description):

    h_i = xxh64(le_u64(h_{i-1}) + le_u32[](token ids of block i), seed=0),  h_{-1} = 0

so the gateway, given the request's token ids (POST /tokenize), computes the same hashes and
counts how many leading blocks a backend already holds. Sets are replaced on every poll; between
polls a routed prompt's blocks are added to its backend, since the engine caches them as it runs.
"""
from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, field

import xxhash

SUPPORTED_HASH = {"algorithm": "xxh64", "seed": 0, "root_parent_hash": 0}
_BIG_ENDIAN = sys.byteorder == "big"


def token_block_hashes(token_ids: list[int], block_size: int, seed: int = 0,
                       root: int = 0) -> list[int]:
    """Chained hashes of every full block of `token_ids`, as the engine computes them."""
    hashes: list[int] = []
    parent = root
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        tokens = array("I", token_ids[start:start + block_size])
        if _BIG_ENDIAN:
            tokens.byteswap()
        h = xxhash.xxh64(parent.to_bytes(8, "little"), seed=seed)
        h.update(tokens.tobytes())
        parent = h.intdigest()
        hashes.append(parent)
    return hashes


@dataclass
class _Backend:
    block_size: int
    hashes: set[int] = field(default_factory=set)


def _compatible(summary: dict) -> bool:
    described = summary.get("hash") or {}
    return all(described.get(k, v) == v for k, v in SUPPORTED_HASH.items())


class ResidentBlocks:
    def __init__(self) -> None:
        self._backends: dict[str, _Backend] = {}

    def update(self, backend_id: str, summary: dict | None) -> None:
        """Replace a backend's set from its /kv/summary; None or an unknown hash scheme forgets it
        (the backend is then routed approximately)."""
        if not summary or not _compatible(summary) or summary.get("enable_prefix_caching") is False:
            self.forget(backend_id)
            return
        raw = summary.get("resident_hashes", summary.get("hashes")) or ()
        try:
            block_size = int(summary["block_size"])
            hashes = {int(h, 16) for h in raw}
        except (KeyError, TypeError, ValueError):
            self.forget(backend_id)
            return
        if block_size <= 0:
            self.forget(backend_id)
            return
        self._backends[backend_id] = _Backend(block_size, hashes)

    def attach(self, backend_id: str, block_size: int) -> None:
        """An empty set kept up to date by someone else (vLLM's KV events: routing/kv_events.py)."""
        self._backends[backend_id] = _Backend(block_size)

    def discard(self, backend_id: str, hashes: list[int]) -> None:
        entry = self._backends.get(backend_id)
        if entry is not None:
            entry.hashes.difference_update(hashes)

    def forget(self, backend_id: str) -> None:
        self._backends.pop(backend_id, None)

    def knows(self, backend_id: str) -> bool:
        return backend_id in self._backends

    def block_size(self, backend_id: str) -> int | None:
        entry = self._backends.get(backend_id)
        return entry.block_size if entry else None

    def match(self, backend_id: str, hashes: list[int]) -> int:
        """Leading blocks of `hashes` resident on the backend (0 when it reports nothing)."""
        entry = self._backends.get(backend_id)
        if entry is None:
            return 0
        matched = 0
        for h in hashes:
            if h not in entry.hashes:
                break
            matched += 1
        return matched

    def add(self, backend_id: str, hashes: list[int]) -> None:
        entry = self._backends.get(backend_id)
        if entry is not None:
            entry.hashes.update(hashes)
