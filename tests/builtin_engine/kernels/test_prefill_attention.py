"""One-launch paged prefill/extend attention (Triton, interpreted) against references."""
import pytest
import torch

from builtin_engine.kernels.attention import paged_attention_torch
from builtin_engine.kernels.prefill_attention import paged_prefill_attention_triton
from builtin_engine.kernels.triton_attention import paged_attention_triton
from tests.builtin_engine.kernels.paged_case import make_case

TOL = {torch.float32: 2e-5, torch.float16: 3e-3}


def _run_both(case):
    scale = case.q.shape[-1] ** -0.5
    expected = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    out = paged_prefill_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, scale)
    return out, expected


@pytest.mark.parametrize("block_size", [16, 5, 32])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2), (8, 1)])
def test_mixed_batch_with_cached_prefix(block_size, heads, kv_heads):
    """Fresh prompt, extend over a cached prefix (partial blocks), and a decode row at once."""
    case = make_case([19, 37, 12], [19, 21, 1], block_size, heads, kv_heads, 32)
    out, expected = _run_both(case)
    torch.testing.assert_close(out, expected, atol=TOL[torch.float32], rtol=TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_prefill_dtypes_and_long_tiles(dtype):
    """Query lengths spanning several BLOCK_M tiles; odd head dim padded inside the kernel."""
    case = make_case([40, 3], [35, 3], 16, 6, 2, 24, dtype, seed=11)
    out, expected = _run_both(case)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_extend_equals_the_same_rows_of_a_full_prefill():
    """Attending over a cached prefix must give what the full prompt's prefill gave."""
    full = make_case([30], [30], 8, 4, 2, 16, seed=4)
    extend = make_case([30], [10], 8, 4, 2, 16, seed=4)  # same caches and tables
    extend.k_cache.copy_(full.k_cache)
    extend.v_cache.copy_(full.v_cache)
    extend.meta.block_tables.copy_(full.meta.block_tables)
    q_full = full.q
    scale = 0.25
    whole = paged_prefill_attention_triton(q_full, full.k_cache, full.v_cache, full.meta, scale)
    tail = paged_prefill_attention_triton(q_full[20:].contiguous(), extend.k_cache,
                                          extend.v_cache, extend.meta, scale)
    torch.testing.assert_close(tail, whole[20:])


def test_matches_dense_causal_attention():
    """Independent of the paged reference: one sequence against SDPA(is_causal) on dense K/V."""
    case = make_case([23], [23], 5, 4, 4, 16, seed=9)
    k = case.k_cache[case.meta.block_tables[0, :5].long()].flatten(0, 1)[:23]
    v = case.v_cache[case.meta.block_tables[0, :5].long()].flatten(0, 1)[:23]
    dense = torch.nn.functional.scaled_dot_product_attention(
        case.q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=0.25)
    out = paged_prefill_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, 0.25)
    torch.testing.assert_close(out, dense.transpose(0, 1), atol=2e-5, rtol=2e-5)


def test_dispatch_picks_decode_or_prefill():
    decode = make_case([9, 17], [1, 1], 16, 2, 1, 16)
    mixed = make_case([9, 17], [1, 4], 16, 2, 1, 16)
    for case in (decode, mixed):
        out = paged_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, 0.25)
        expected = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, 0.25)
        torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)
