"""Block pool invariants under random operations, LRU eviction order and copy-on-write."""
from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from builtin_engine.core.block_pool import (ROOT_PARENT_HASH, BlockPool, CpuBlockPool,
                                             hash_block_tokens, hash_prompt_blocks)


def _cache(pool: BlockPool, block, tokens: tuple[int, ...]) -> int:
    h = hash_block_tokens(ROOT_PARENT_HASH, tokens)
    pool.cache_full_block(block, h, ROOT_PARENT_HASH, tokens)
    return h


class PoolMachine(RuleBasedStateMachine):
    """Sequences hold block references; the pool must always agree with them."""

    def __init__(self):
        super().__init__()
        self.pool = BlockPool(12)
        self.seqs: list[list] = []
        self.next_token = 0

    def refs(self) -> dict[int, int]:
        refs: dict[int, int] = {}
        for seq in self.seqs:
            for b in seq:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        return refs

    @rule(n=st.integers(1, 4))
    def allocate(self, n):
        if n <= self.pool.num_free_blocks:
            self.seqs.append(self.pool.allocate(n))
        else:
            with pytest.raises(RuntimeError):
                self.pool.allocate(n)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def publish(self, data):
        seq = data.draw(st.sampled_from(self.seqs))
        block = data.draw(st.sampled_from(seq))
        self.next_token += 1
        _cache(self.pool, block, (self.next_token,) * 4)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def free(self, data):
        seq = self.seqs.pop(data.draw(st.integers(0, len(self.seqs) - 1)))
        self.pool.free(seq[::-1])

    @rule(data=st.data())
    def hit(self, data):
        cached = [b for b in self.pool.blocks if b.block_hash is not None]
        if not cached:
            return
        block = data.draw(st.sampled_from(cached))
        found = self.pool.get_cached_block(block.block_hash, ROOT_PARENT_HASH, block.token_ids)
        assert found is block
        self.pool.touch([found])
        self.seqs.append([found])

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def write(self, data):
        seq = data.draw(st.sampled_from(self.seqs))
        i = data.draw(st.integers(0, len(seq) - 1))
        block = seq[i]
        if block.ref_cnt > 1 and self.pool.num_free_blocks == 0:
            return
        shared_before = block.ref_cnt
        new_block, copy = self.pool.copy_on_write(block)
        if shared_before > 1:
            assert copy == (block.block_id, new_block.block_id) and new_block is not block
        else:
            assert copy is None and new_block is block and block.block_hash is None
        seq[i] = new_block

    @invariant()
    def consistent(self):
        self.pool.check_integrity(self.refs())


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_eviction_takes_least_recently_freed_cached_block():
    pool = BlockPool(4)
    blocks = pool.allocate(4)
    hashes = [_cache(pool, b, (i, i)) for i, b in enumerate(blocks)]
    for i in (2, 0, 3, 1):
        pool.free([blocks[i]])
    (taken,) = pool.allocate(1)
    assert taken is blocks[2]
    assert hashes[2] not in pool.resident_hashes() and hashes[0] in pool.resident_hashes()
    # A hit takes block 0 out of the queue; freed again, it becomes the most recent.
    pool.touch([blocks[0]])
    pool.free([blocks[0]])
    assert [b.block_id for b in pool.allocate(2)] == [blocks[3].block_id, blocks[1].block_id]
    pool.check_integrity({blocks[2].block_id: 1, blocks[3].block_id: 1, blocks[1].block_id: 1})


def test_uncached_free_blocks_are_reused_before_cached_ones():
    pool = BlockPool(3)
    a, b, c = pool.allocate(3)
    _cache(pool, a, (7,))
    pool.free([a])
    pool.free([b])
    assert pool.allocate(1)[0] is b
    assert pool.num_evictions == 0


def test_copy_on_write_copies_only_the_shared_block():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    pool.touch([a])  # a is shared by two sequences, b is private
    new_a, copy = pool.copy_on_write(a)
    assert copy == (a.block_id, new_a.block_id) and a.ref_cnt == 1 and new_a.ref_cnt == 1
    same_b, no_copy = pool.copy_on_write(b)
    assert same_b is b and no_copy is None
    pool.check_integrity({a.block_id: 1, new_a.block_id: 1, b.block_id: 1})


def test_hash_collision_is_rejected_by_token_check():
    pool = BlockPool(2)
    (a,) = pool.allocate(1)
    h = _cache(pool, a, (1, 2, 3))
    assert pool.get_cached_block(h, ROOT_PARENT_HASH, (1, 2, 3)) is a
    assert pool.get_cached_block(h, ROOT_PARENT_HASH, (1, 2, 4)) is None
    assert pool.get_cached_block(h, 99, (1, 2, 3)) is None


def test_double_free_raises():
    pool = BlockPool(2)
    (a,) = pool.allocate(1)
    pool.free([a])
    with pytest.raises(RuntimeError, match="double free"):
        pool.free([a])
    cpu = CpuBlockPool(2)
    ids = cpu.allocate(2)
    cpu.free(ids)
    with pytest.raises(RuntimeError, match="double free"):
        cpu.free(ids[:1])


def test_hashes_chain_and_depend_on_extra_key():
    tokens = list(range(40))
    hashes = hash_prompt_blocks(tokens, 16)
    assert len(hashes) == 2
    assert hashes[1] == hash_block_tokens(hashes[0], tokens[16:32])
    assert hash_prompt_blocks(tokens, 16, b"lora-1") != hashes
    assert hash_prompt_blocks([999] + tokens[1:], 16)[1] != hashes[1]  # parent change propagates
