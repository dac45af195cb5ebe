"""The device block pool: ref counts, content hashes of full blocks and an LRU free queue.

A freed block whose content is hashed stays in the hash map and at the tail of the free queue,
so a later request with the same prefix can take it back (a prefix cache hit). Allocation
takes blocks from the head of the queue: the least recently freed one, whose hash is evicted
then. The free queue is therefore also the LRU evictor.

Block hashes chain from the parent block's hash, so one hash names a whole prefix:
    h_i = xxh64(le_u64(h_{i-1}) + le_u32[](tokens of block i) + extra_key, seed=HASH_SEED)
with h_{-1} = ROOT_PARENT_HASH. A gateway can compute the same values from token ids.
"""
from __future__ import annotations

import sys
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import xxhash

HASH_SEED = 0
ROOT_PARENT_HASH = 0
HASH_DESCRIPTION = {
    "algorithm": "xxh64",
    "seed": HASH_SEED,
    "root_parent_hash": ROOT_PARENT_HASH,
    "input": "parent_hash as 8-byte little-endian unsigned, then each token id of the full "
             "block as 4-byte little-endian unsigned, then the extra key bytes (if any)",
    "chained": True,
    "hex": "16 lowercase hex digits of the unsigned 64-bit digest",
}
_BIG_ENDIAN = sys.byteorder == "big"


def hash_block_tokens(parent_hash: int, token_ids: Sequence[int],
                      extra_key: bytes | None = None) -> int:
    tokens = array("I", token_ids)
    if _BIG_ENDIAN:
        tokens.byteswap()
    h = xxhash.xxh64(parent_hash.to_bytes(8, "little"), seed=HASH_SEED)
    h.update(tokens.tobytes())
    if extra_key:
        h.update(extra_key)
    return h.intdigest()


def hash_prompt_blocks(token_ids: Sequence[int], block_size: int,
                       extra_key: bytes | None = None) -> list[int]:
    """Chained hashes of every full block of token_ids."""
    hashes, parent = [], ROOT_PARENT_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start:start + block_size], extra_key)
        hashes.append(parent)
    return hashes


class Block:
    __slots__ = ("block_id", "ref_cnt", "block_hash", "parent_hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: int | None = None
        self.parent_hash: int | None = None
        self.token_ids: tuple[int, ...] | None = None  # kept to reject hash collisions

    def __repr__(self) -> str:
        return f"Block({self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Insertion-ordered: head = next to allocate (LRU), tail = most recently freed.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}  # block hash -> block id
        self.num_evictions = 0

    # ---- queries --------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def resident_hashes(self) -> list[int]:
        """Hashes of cached blocks, oldest first (copied in one C call, safe to read from
        another thread while the engine runs)."""
        return list(self._cached)

    def get_cached_block(self, block_hash: int, parent_hash: int,
                         token_ids: Sequence[int]) -> Block | None:
        block_id = self._cached.get(block_hash)
        if block_id is None:
            return None
        block = self.blocks[block_id]
        # A 64-bit hash can collide; equal tokens and parent make the hit exact.
        if block.parent_hash != parent_hash or block.token_ids != tuple(token_ids):
            return None
        return block

    # ---- allocation -----------------------------------------------------------------------
    def allocate(self, n: int) -> list[Block]:
        if n > len(self._free):
            raise RuntimeError(f"cannot allocate {n} blocks, {len(self._free)} free")
        out = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Sequence[Block]) -> None:
        """Take a reference on cached blocks found by a prefix hit."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: Sequence[Block]) -> None:
        """Drop one reference from each block; unreferenced ones join the free queue tail.

        Callers pass a request's blocks in reverse order, so its last blocks (the least
        likely to be shared) are evicted before its prefix."""
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"double free of block {block.block_id}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    # Nothing to reuse: put it at the head so it is taken first.
                    self._free[block.block_id] = None
                    self._free.move_to_end(block.block_id, last=False)
                else:
                    self._free[block.block_id] = None

    def cache_full_block(self, block: Block, block_hash: int, parent_hash: int,
                         token_ids: Sequence[int]) -> bool:
        """Publish a full, computed block under its hash. False if that hash is taken."""
        if not self.enable_caching or block.block_hash is not None:
            return False
        if block_hash in self._cached:
            return False  # an identical block is already resident; this copy stays private
        block.block_hash = block_hash
        block.parent_hash = parent_hash
        block.token_ids = tuple(token_ids)
        self._cached[block_hash] = block.block_id
        return True

    def copy_on_write(self, block: Block) -> tuple[Block, tuple[int, int] | None]:
        """Return a block the caller may write. A shared block is copied to a fresh one
        (the caller schedules the (src, dst) copy) and the caller's reference moves there."""
        if block.ref_cnt <= 1 and block.block_hash is None:
            return block, None
        if block.ref_cnt <= 1:
            # Sole owner of a published block: unpublish it, since its content will change.
            self._evict(block)
            return block, None
        (new_block,) = self.allocate(1)
        block.ref_cnt -= 1
        return new_block, (block.block_id, new_block.block_id)

    def reset_prefix_cache(self) -> None:
        for block_id in list(self._cached.values()):
            self._evict(self.blocks[block_id])

    def _evict(self, block: Block) -> None:
        if block.block_hash is not None:
            if self._cached.get(block.block_hash) == block.block_id:
                del self._cached[block.block_hash]
            block.block_hash = block.parent_hash = block.token_ids = None
            self.num_evictions += 1

    # ---- invariants -----------------------------------------------------------------------
    def check_integrity(self, expected_refs: dict[int, int] | None = None) -> None:
        """Assert the pool's invariants; expected_refs maps block id -> holders (optional)."""
        used = sum(1 for b in self.blocks if b.ref_cnt > 0)
        assert used + len(self._free) == self.num_blocks, (used, len(self._free))
        for block in self.blocks:
            assert block.ref_cnt >= 0, block
            assert (block.ref_cnt == 0) == (block.block_id in self._free), block
        for block_hash, block_id in self._cached.items():
            block = self.blocks[block_id]
            assert block.block_hash == block_hash, (block, block_hash)
            assert block.token_ids is not None and block.parent_hash is not None, block
        hashed = [b for b in self.blocks if b.block_hash is not None]
        assert len(hashed) == len(self._cached), "a hashed block is missing from the map"
        if expected_refs is not None:
            for block in self.blocks:
                assert block.ref_cnt == expected_refs.get(block.block_id, 0), block


class CpuBlockPool:
    """Swap space: plain block ids, no sharing or hashing (a swapped request owns its copy)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._used: set[int] = set()

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"cannot allocate {n} cpu blocks, {len(self._free)} free")
        out = [self._free.pop() for _ in range(n)]
        self._used.update(out)
        return out

    def free(self, block_ids: Sequence[int]) -> None:
        for block_id in block_ids:
            if block_id not in self._used:
                raise RuntimeError(f"double free of cpu block {block_id}")
            self._used.remove(block_id)
            self._free.append(block_id)

    def check_integrity(self) -> None:
        assert len(self._free) + len(self._used) == self.num_blocks
        assert not self._used.intersection(self._free)
