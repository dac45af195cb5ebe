"""Prefix lookup, slot allocation, watermark and swap bookkeeping."""
from __future__ import annotations

from builtin_engine.core.kv_cache_manager import KVCacheManager
from builtin_engine.core.request import Request
from builtin_engine.core.sampling_params import SamplingParams


def _req(rid: str, tokens: list[int]) -> Request:
    return Request(rid, tokens, SamplingParams(max_tokens=4))


def _run_prefill(kv: KVCacheManager, req: Request) -> list[int]:
    blocks, cached = kv.get_computed_blocks(req)
    ids = kv.allocate_slots(req, req.num_tokens - cached, blocks, cached)
    assert ids is not None
    kv.record_prefix_lookup(req.num_tokens, cached)
    req.num_computed_tokens = req.num_tokens
    kv.cache_computed_blocks(req)
    return ids


def test_second_request_sharing_64_token_prefix_hits_64_tokens():
    kv = KVCacheManager(num_blocks=32, block_size=16)
    prefix = list(range(1000, 1064))
    first = _req("a", prefix + [1, 2, 3])
    ids_a = _run_prefill(kv, first)
    second = _req("b", prefix + [4, 5, 6, 7, 8])
    ids_b = _run_prefill(kv, second)
    assert kv.prefix_hits == 64 and kv.prefix_queries == 67 + 69
    assert ids_b[:4] == ids_a[:4] and ids_b[4] != ids_a[4]
    kv.check_integrity()
    kv.free(first)
    kv.free(second)
    kv.check_integrity()
    assert kv.num_free_blocks == 32


def test_last_prompt_token_is_never_counted_as_computed():
    kv = KVCacheManager(num_blocks=16, block_size=16)
    tokens = list(range(500, 532))  # exactly two blocks
    _run_prefill(kv, _req("a", tokens))
    blocks, cached = kv.get_computed_blocks(_req("b", tokens))
    assert cached == 16 and len(blocks) == 1  # the second block holds the last token


def test_different_extra_key_does_not_hit():
    kv = KVCacheManager(num_blocks=16, block_size=16)
    tokens = list(range(500, 540))
    _run_prefill(kv, _req("a", tokens))
    other = Request("b", tokens, SamplingParams(), extra_key=b"adapter-7")
    assert kv.get_computed_blocks(other)[1] == 0


def test_prefix_caching_off_never_hits():
    kv = KVCacheManager(num_blocks=16, block_size=16, enable_prefix_caching=False)
    tokens = list(range(500, 540))
    _run_prefill(kv, _req("a", tokens))
    assert kv.get_computed_blocks(_req("b", tokens)) == ([], 0)
    assert kv.resident_hashes() == []


def test_allocate_returns_none_and_changes_nothing_when_full():
    kv = KVCacheManager(num_blocks=4, block_size=16, watermark=0.5)
    req = _req("a", list(range(100, 150)))
    assert kv.allocate_slots(req, 50, use_watermark=True) is None  # 4 blocks > 4 - 2 reserve
    assert kv.num_free_blocks == 4 and kv.block_ids("a") == []
    assert kv.allocate_slots(req, 50) is not None
    assert kv.allocate_slots(_req("b", [1, 2]), 2) is None
    kv.check_integrity()


def test_hits_on_free_cached_blocks_count_against_free_space():
    kv = KVCacheManager(num_blocks=4, block_size=16)
    tokens = list(range(100, 164))
    a = _req("a", tokens)
    _run_prefill(kv, a)
    kv.free(a)  # 4 cached blocks now sit in the free queue
    b = _req("b", tokens[:48] + [7] * 30)
    blocks, cached = kv.get_computed_blocks(b)
    assert cached == 48
    assert kv.allocate_slots(b, b.num_tokens - cached, blocks, cached) is None  # needs 5
    kv.check_integrity()
    assert kv.num_free_blocks == 4


def test_swap_out_and_in_round_trip():
    kv = KVCacheManager(num_blocks=8, block_size=16, num_cpu_blocks=8)
    req = _req("a", list(range(100, 140)))
    _run_prefill(kv, req)
    out = kv.swap_out(req)
    assert len(out) == 3 and kv.num_free_blocks == 8 and kv.cpu_pool.num_free_blocks == 5
    assert kv.can_swap_in(req, 1, use_watermark=False)
    back = kv.swap_in(req)
    assert [c for c, _ in back] == [c for _, c in out]
    assert kv.cpu_pool.num_free_blocks == 8 and len(kv.block_ids("a")) == 3
    kv.check_integrity()
