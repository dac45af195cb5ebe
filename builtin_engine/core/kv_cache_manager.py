"""Per-request block tables on top of the block pool: prefix lookup, slot allocation, swap."""
from __future__ import annotations

from builtin_engine.core.block_pool import (ROOT_PARENT_HASH, Block, BlockPool, CpuBlockPool,
                                             hash_block_tokens)
from builtin_engine.core.request import Request


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 watermark: float = 0.01, num_cpu_blocks: int = 0) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, enable_caching=enable_prefix_caching)
        self.cpu_pool = CpuBlockPool(num_cpu_blocks)
        # Kept free for running requests so admitting new ones does not force preemptions.
        self.watermark_blocks = int(watermark * num_blocks)
        self.req_blocks: dict[str, list[Block]] = {}
        self.req_block_ids: dict[str, list[int]] = {}  # same tables as ints, for executors
        self.req_num_cached: dict[str, int] = {}  # how many leading blocks are published
        self.req_cpu_blocks: dict[str, list[int]] = {}
        self.pending_copies: list[tuple[int, int]] = []  # copy-on-write, drained per step
        self.prefix_queries = 0  # tokens looked up
        self.prefix_hits = 0  # tokens found

    # ---- queries --------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        return self.pool.usage

    def resident_hashes(self) -> list[int]:
        return self.pool.resident_hashes()

    @property
    def num_resident_hashes(self) -> int:
        return self.pool.num_cached_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_ids(self, request_id: str) -> list[int]:
        return self.req_block_ids.get(request_id, [])

    # ---- prefix cache ---------------------------------------------------------------------
    def _extend_hashes(self, request: Request, num_full_blocks: int) -> None:
        hashes, bs = request.block_hashes, self.block_size
        parent = hashes[-1] if hashes else ROOT_PARENT_HASH
        for i in range(len(hashes), num_full_blocks):
            parent = hash_block_tokens(parent, request.token_ids[i * bs:(i + 1) * bs],
                                       request.extra_key)
            hashes.append(parent)

    def get_computed_blocks(self, request: Request) -> tuple[list[Block], int]:
        """Longest run of cached full blocks prefixing the request, and its length in tokens.

        The last token is never counted as computed: its forward pass yields the logits the
        next token is sampled from."""
        if not self.enable_prefix_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        self._extend_hashes(request, max_blocks)
        bs, hits, parent = self.block_size, [], ROOT_PARENT_HASH
        for i in range(max_blocks):
            block_hash = request.block_hashes[i]
            block = self.pool.get_cached_block(
                block_hash, parent, request.token_ids[i * bs:(i + 1) * bs])
            if block is None:
                break
            hits.append(block)
            parent = block_hash
        return hits, len(hits) * bs

    def record_prefix_lookup(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Counted once per admission, not per retry of a request that did not fit."""
        self.prefix_queries += num_query_tokens
        self.prefix_hits += num_hit_tokens

    def cache_computed_blocks(self, request: Request) -> None:
        """Publish the request's blocks that became full and computed this step."""
        if not self.enable_prefix_caching:
            return
        rid = request.request_id
        blocks = self.req_blocks.get(rid)
        if not blocks:
            return
        num_full = min(request.num_computed_tokens // self.block_size, len(blocks))
        start = self.req_num_cached.get(rid, 0)
        if num_full <= start:
            return
        self._extend_hashes(request, num_full)
        bs, hashes = self.block_size, request.block_hashes
        for i in range(start, num_full):
            parent = hashes[i - 1] if i else ROOT_PARENT_HASH
            self.pool.cache_full_block(blocks[i], hashes[i], parent,
                                       request.token_ids[i * bs:(i + 1) * bs])
        self.req_num_cached[rid] = num_full

    # ---- allocation -----------------------------------------------------------------------
    def allocate_slots(self, request: Request, num_new_tokens: int,
                       new_computed_blocks: list[Block] | None = None,
                       num_new_computed_tokens: int = 0,
                       use_watermark: bool = False) -> list[int] | None:
        """Give the request room for num_new_tokens more K/V entries (after its cached hits).

        Returns the full block table, or None when the free blocks (minus the watermark for
        requests being admitted) cannot hold them; nothing changes in that case."""
        rid = request.request_id
        blocks = self.req_blocks.setdefault(rid, [])
        computed = new_computed_blocks or []
        total = request.num_computed_tokens + num_new_computed_tokens + num_new_tokens
        num_new = self.blocks_needed(total) - len(blocks) - len(computed)
        # Hits on blocks sitting in the free queue take them out of it, too.
        num_revived = sum(1 for b in computed if b.ref_cnt == 0)
        reserve = self.watermark_blocks if use_watermark else 0
        if max(num_new, 0) + num_revived > self.pool.num_free_blocks - reserve:
            if not blocks:
                self._forget(rid)
            return None
        ids = self.req_block_ids.setdefault(rid, [])
        if computed:
            self.pool.touch(computed)
            blocks.extend(computed)
            ids.extend(b.block_id for b in computed)
            self.req_num_cached[rid] = len(blocks)
        self._make_writable(request, blocks, ids, num_new_computed_tokens)
        if num_new > 0:
            fresh = self.pool.allocate(num_new)
            blocks.extend(fresh)
            ids.extend(b.block_id for b in fresh)
        return ids

    def _make_writable(self, request: Request, blocks: list[Block], ids: list[int],
                       num_new_computed_tokens: int) -> None:
        """The block receiving the next token must not be shared (copy-on-write)."""
        first_write = request.num_computed_tokens + num_new_computed_tokens
        idx = first_write // self.block_size
        if idx >= len(blocks):
            return
        block = blocks[idx]
        if block.ref_cnt <= 1 and block.block_hash is None:
            return
        new_block, copy = self.pool.copy_on_write(block)
        blocks[idx], ids[idx] = new_block, new_block.block_id
        self.req_num_cached[request.request_id] = min(
            self.req_num_cached.get(request.request_id, 0), idx)
        if copy is not None:
            self.pending_copies.append(copy)

    def free_excess_blocks(self, request: Request, num_tokens: int) -> int:
        """Return the request's blocks beyond those num_tokens need (reached only by rejected
        draft tokens) to the pool; returns how many were freed. They hold no published
        prefix: only computed full blocks are hashed, and those lie within num_tokens."""
        rid = request.request_id
        blocks = self.req_blocks.get(rid)
        keep = self.blocks_needed(num_tokens)
        if not blocks or len(blocks) <= keep:
            return 0
        extra = blocks[keep:]
        del blocks[keep:]
        del self.req_block_ids[rid][keep:]
        self.req_num_cached[rid] = min(self.req_num_cached.get(rid, 0), keep)
        self.pool.free(extra[::-1])
        return len(extra)

    def free(self, request: Request) -> None:
        rid = request.request_id
        blocks = self.req_blocks.get(rid)
        if blocks:
            self.pool.free(blocks[::-1])
        self._forget(rid)
        cpu = self.req_cpu_blocks.pop(rid, None)
        if cpu:
            self.cpu_pool.free(cpu)

    def _forget(self, rid: str) -> None:
        self.req_blocks.pop(rid, None)
        self.req_block_ids.pop(rid, None)
        self.req_num_cached.pop(rid, None)

    # ---- swap -----------------------------------------------------------------------------
    def can_swap_out(self, request: Request) -> bool:
        return len(self.req_blocks.get(request.request_id, ())) <= self.cpu_pool.num_free_blocks

    def swap_out(self, request: Request) -> list[tuple[int, int]]:
        """Move the request's blocks to CPU; returns (device, cpu) copies to apply first."""
        rid = request.request_id
        blocks = self.req_blocks.get(rid, [])
        cpu = self.cpu_pool.allocate(len(blocks))
        mapping = [(b.block_id, c) for b, c in zip(blocks, cpu)]
        self.pool.free(blocks[::-1])
        self._forget(rid)
        self.req_cpu_blocks[rid] = cpu
        return mapping

    def can_swap_in(self, request: Request, num_new_tokens: int, use_watermark: bool) -> bool:
        need = self.blocks_needed(request.num_computed_tokens + num_new_tokens)
        reserve = self.watermark_blocks if use_watermark else 0
        return need <= self.pool.num_free_blocks - reserve

    def swap_in(self, request: Request) -> list[tuple[int, int]]:
        """Bring a swapped request's blocks back; returns (cpu, device) copies."""
        rid = request.request_id
        cpu = self.req_cpu_blocks.pop(rid)
        blocks = self.pool.allocate(len(cpu))
        self.req_blocks[rid] = blocks
        self.req_block_ids[rid] = [b.block_id for b in blocks]
        self.req_num_cached[rid] = 0  # copies are private; republished as they are seen
        self.cpu_pool.free(cpu)
        return [(c, b.block_id) for c, b in zip(cpu, blocks)]

    def take_pending_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def check_integrity(self) -> None:
        refs: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        self.pool.check_integrity(refs)
        self.cpu_pool.check_integrity()
        for rid, blocks in self.req_blocks.items():
            assert self.req_block_ids[rid] == [b.block_id for b in blocks], rid
