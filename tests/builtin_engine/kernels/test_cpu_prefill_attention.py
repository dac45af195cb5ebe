"""The C++ CPU prompt attention kernel against the torch reference: prompts from position 0,
later chunks after a cached prefix, runs of one token to several hundred, GQA ratios, block
sizes, scattered block tables, float32 and bfloat16 caches; the compiled mixed step uses it;
bad shapes are refused with a message instead of reading out of bounds."""
import pytest
import torch

from builtin_engine.core.device_defaults import cpu_flags
from builtin_engine.kernels.attention import paged_attention_torch
from builtin_engine.kernels.cpu_prefill_attention import (cpu_prefill_attention_available,
                                                          cpu_prefill_attention_serves)
from builtin_engine.kernels.paged_attention_ops import pack_long_runs, prefill_attention_op
from tests.builtin_engine.kernels.paged_case import make_case

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _kernel(case, scale):
    m = case.meta
    return torch.ops.inferplane.cpu_prefill_attention(
        case.q, case.k_cache, case.v_cache, m.block_tables, m.query_start_loc, m.seq_lens, scale)


@pytest.fixture(autouse=True, scope="module")
def _the_op_is_defined():
    cpu_prefill_attention_available()  # loading the extension defines the op


def test_the_kernel_builds_here():
    assert cpu_prefill_attention_available()


@pytest.mark.parametrize("block_size", [16, 5, 32])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 4, 32), (9, 3, 64), (8, 1, 128),
                                                     (6, 2, 24)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_reference(block_size, heads, kv_heads, head_dim, dtype):
    # whole prompts (17 and 300 tokens), chunks after a prefix (40 of 100, 1 of 33), and a
    # run that ends exactly on a block boundary
    lens, query_lens = [17, 100, 300, 33, 4 * block_size], [17, 40, 300, 1, 2 * block_size]
    case = make_case(lens, query_lens, block_size, heads, kv_heads, head_dim, dtype=dtype)
    scale = head_dim ** -0.5
    want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    got = _kernel(case, scale)
    assert got.dtype == dtype and got.shape == case.q.shape
    torch.testing.assert_close(got.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_the_mixed_steps_prompt_op_runs_the_kernel_on_avx512():
    """Where its AVX-512 path applies the op runs the kernel; elsewhere SDPA's flash kernel,
    which the portable C++ loops do not beat."""
    from torch.profiler import profile
    case = make_case([90, 130], [90, 50], 16, 9, 3, 64, dtype=torch.bfloat16, seed=3)
    long_meta, long_tables = pack_long_runs(case.meta, [0, 1])
    with profile() as prof:
        got = prefill_attention_op(case.q, case.k_cache, case.v_cache, long_meta, long_tables,
                                   0.125)
    ran = {e.key for e in prof.key_averages()}
    kernel = "avx512f" in cpu_flags()
    assert ("inferplane::cpu_prefill_attention" in ran) == kernel
    assert ("aten::_scaled_dot_product_flash_attention_for_cpu" in ran) == (not kernel)
    odd_block = make_case([40], [40], 5, 9, 3, 64, dtype=torch.bfloat16)
    assert not cpu_prefill_attention_serves(odd_block.k_cache, 64)
    want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, 0.125)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_shapes_that_disagree_are_refused():
    case = make_case([20, 30], [20, 10], 16, 4, 2, 32)
    m = case.meta
    with pytest.raises(RuntimeError, match="head shapes disagree"):
        torch.ops.inferplane.cpu_prefill_attention(
            case.q[:, :3], case.k_cache, case.v_cache, m.block_tables, m.query_start_loc,
            m.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="query starts must cover q"):
        torch.ops.inferplane.cpu_prefill_attention(
            case.q[:5], case.k_cache, case.v_cache, m.block_tables, m.query_start_loc,
            m.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="within its context"):
        torch.ops.inferplane.cpu_prefill_attention(
            case.q, case.k_cache, case.v_cache, m.block_tables, m.query_start_loc,
            torch.tensor([20, 5]), 0.1)
    with pytest.raises(RuntimeError, match="exceeds its table"):
        torch.ops.inferplane.cpu_prefill_attention(
            case.q, case.k_cache, case.v_cache, m.block_tables, m.query_start_loc,
            torch.tensor([20, 3000]), 0.1)
