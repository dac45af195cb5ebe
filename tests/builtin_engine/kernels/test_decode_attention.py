"""Split-KV paged decode attention (Triton, interpreted) against the torch reference."""
import pytest
import torch

from builtin_engine.kernels.attention import paged_attention_torch
from builtin_engine.kernels.decode_attention import choose_num_splits, paged_decode_attention_triton
from tests.builtin_engine.kernels.paged_case import make_case

TOL = {torch.float32: 2e-5, torch.float16: 3e-3}


def _check(case, dtype, **kwargs):
    scale = case.q.shape[-1] ** -0.5
    expected = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    out = paged_decode_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, scale,
                                        **kwargs)
    assert out.dtype == dtype and out.shape == case.q.shape
    torch.testing.assert_close(out.float(), expected.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("block_size", [16, 5, 32])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2), (8, 1)])
def test_decode_gqa_and_block_sizes(block_size, heads, kv_heads):
    """Lengths 1, a partial last block and a longer context; GQA ratios 1, 3, 8."""
    case = make_case([1, block_size + 3, 70], [1, 1, 1], block_size, heads, kv_heads, 32)
    _check(case, torch.float32, num_splits=1)


@pytest.mark.parametrize("num_splits", [2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_many_splits(num_splits, dtype):
    """More splits than some sequences have tokens: empty splits must drop out of the merge."""
    case = make_case([2, 33, 90, 7], [1, 1, 1, 1], 16, 6, 2, 32, dtype, seed=3)
    _check(case, dtype, num_splits=num_splits, block_n=16)


def test_decode_head_dim_not_power_of_two():
    case = make_case([20, 9], [1, 1], 5, 3, 1, 24, seed=5)
    _check(case, torch.float32, num_splits=2)


def test_decode_split_count_is_one_on_cpu():
    assert choose_num_splits(4, 3, 10000, torch.device("cpu")) == 1


def test_decode_ignores_blocks_past_the_sequence():
    """Garbage in table entries beyond a sequence's blocks must not change the output."""
    case = make_case([9, 4], [1, 1], 4, 2, 2, 16, seed=7)
    scale = 0.25
    before = paged_decode_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, scale)
    case.meta.block_tables[1, 1:] = 0  # padding already 0; now point at block 0 explicitly
    case.k_cache[case.meta.block_tables[0, 2]] [1:] = 1e4  # slots past seq 0's 9th token
    after = paged_decode_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, scale)
    torch.testing.assert_close(before, after)
