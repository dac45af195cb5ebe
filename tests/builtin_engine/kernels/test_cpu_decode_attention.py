"""The C++ CPU decode attention kernel against the torch reference: GQA ratios, block sizes,
contexts of one token, a partial last block and several blocks, scattered block tables,
float32 and bfloat16 caches; it builds on this machine (a compiler is part of the set-up),
and bad shapes are refused with a message instead of reading out of bounds."""
import pytest
import torch

from builtin_engine.kernels.attention import paged_attention_torch
from builtin_engine.kernels.cpu_decode_attention import cpu_decode_attention_available
from tests.builtin_engine.kernels.paged_case import make_case

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _check(case, dtype):
    scale = case.q.shape[-1] ** -0.5
    expected = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    out = torch.ops.inferplane.cpu_decode_attention(
        case.q, case.k_cache, case.v_cache, case.meta.block_tables, case.meta.seq_lens, scale)
    assert out.dtype == dtype and out.shape == case.q.shape
    torch.testing.assert_close(out.float(), expected.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.fixture(autouse=True, scope="module")
def _the_op_is_defined():
    cpu_decode_attention_available()  # loading the extension defines the op


def test_the_kernel_builds_here():
    assert cpu_decode_attention_available()


@pytest.mark.parametrize("block_size", [16, 5, 32])
# The AVX-512 path takes 16-slot blocks with heads of 64 or 128 and 1-4 query heads a KV
# head: (9, 3, 64), (4, 4, 64) and (8, 2, 128) at block size 16; the rest run the plain loops.
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 4, 32), (9, 3, 64), (8, 1, 128),
                                                     (6, 2, 24), (4, 4, 64), (8, 2, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_reference(block_size, heads, kv_heads, head_dim, dtype):
    lens = [1, block_size, block_size + 3, 70, 301]
    case = make_case(lens, [1] * len(lens), block_size, heads, kv_heads, head_dim, dtype=dtype)
    _check(case, dtype)


def test_shapes_that_disagree_are_refused():
    case = make_case([5, 9], [1, 1], 16, 4, 2, 32)
    with pytest.raises(RuntimeError, match="head shapes disagree"):
        torch.ops.inferplane.cpu_decode_attention(
            case.q[:, :3], case.k_cache, case.v_cache, case.meta.block_tables,
            case.meta.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="one context token"):
        torch.ops.inferplane.cpu_decode_attention(
            case.q, case.k_cache, case.v_cache, case.meta.block_tables,
            torch.tensor([0, 9]), 0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slots_past_a_context_never_leak_in_even_when_they_hold_nan(dtype):
    # The vector path reads a whole 16-slot block and masks the slots past the context: a
    # stale slot (another request's leftovers, here NaN) must not reach the output.
    lens = [1, 5, 17, 40, 333]
    case = make_case(lens, [1] * len(lens), 16, 9, 3, 64, dtype=dtype)
    scale = 0.125
    # (the torch reference itself lets NaN through: it is taken before the poisoning)
    expected = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    for row, n in enumerate(lens):
        table = case.meta.block_tables[row]
        for pos in range(n, -(-n // 16) * 16):
            block, slot = int(table[pos // 16]), pos % 16
            case.k_cache[block, slot] = float("nan")
            case.v_cache[block, slot] = float("nan")
    out = torch.ops.inferplane.cpu_decode_attention(
        case.q, case.k_cache, case.v_cache, case.meta.block_tables, case.meta.seq_lens, scale)
    torch.testing.assert_close(out.float(), expected.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (8, 2, 128), (4, 4, 32)])
def test_a_bfloat16_query_gives_what_its_float32_copy_gives(heads, kv_heads, head_dim):
    # A bfloat16 query over a bfloat16 cache is read and answered in place (no float32 copies):
    # the same bits as the float32 route rounded back, on the vector path and off it (dim 32).
    case = make_case([1, 16, 19, 70, 301], [1] * 5, 16, heads, kv_heads, head_dim,
                     dtype=torch.bfloat16)
    args = (case.k_cache, case.v_cache, case.meta.block_tables, case.meta.seq_lens, 0.125)
    direct = torch.ops.inferplane.cpu_decode_attention(case.q, *args)
    via_float = torch.ops.inferplane.cpu_decode_attention(case.q.float(), *args)
    assert direct.dtype == torch.bfloat16 and via_float.dtype == torch.float32
    assert torch.equal(direct, via_float.to(torch.bfloat16))
    strided = torch.ops.inferplane.cpu_decode_attention(
        case.q.transpose(0, 1).contiguous().transpose(0, 1), *args)
    assert torch.equal(direct, strided)
