"""The bfloat16 prompt attention kernel (AMX tiles, or AVX512-BF16 dot products) against the
torch reference (bfloat16: whole prompts, chunks after a cached prefix, one-token runs, runs
ending on a chunk boundary, GQA ratios, block sizes, head sizes), the prompt op routing
bfloat16 caches to it and not float32 ones, the start-up line naming the engine, and bad input
refused with a message. Runs where the CPU has AVX512-BF16 or AMX."""
import pytest
import torch

from builtin_engine.core.device_defaults import cpu_flags
from builtin_engine.kernels.attention import paged_attention_torch
from builtin_engine.kernels.cpu_prefill_attention_bf16 import (bf16_prefill_attention,
                                                               bf16_prefill_engine,
                                                               bf16_prefill_serves)
from tests.builtin_engine.kernels.paged_case import make_case

pytestmark = pytest.mark.skipif(not {"amx_bf16", "avx512_bf16"} & cpu_flags(),
                                reason="the CPU has no bfloat16 dot products")


def _run(case, scale):
    m = case.meta
    return bf16_prefill_attention(case.q, case.k_cache, case.v_cache, m.block_tables,
                                 m.query_start_loc, m.seq_lens, scale)


def test_the_kernel_builds_and_names_its_engine():
    want = "AMX tiles" if "amx_bf16" in cpu_flags() else "AVX512-BF16 dot products"
    assert bf16_prefill_engine() == want


def test_head_sizes_the_vector_path_lacks_go_elsewhere():
    k_cache = torch.zeros(4, 16, 1, 96, dtype=torch.bfloat16)
    assert bf16_prefill_serves(k_cache, 96) == (bf16_prefill_engine() == "AMX tiles")
    assert not bf16_prefill_serves(k_cache.float(), 64)
    assert not bf16_prefill_serves(torch.zeros(4, 16, 1, 48, dtype=torch.bfloat16), 48)


@pytest.mark.parametrize("block_size", [16, 5, 32])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (8, 1, 128), (4, 4, 32)])
def test_matches_the_reference(block_size, heads, kv_heads, head_dim):
    # whole prompts (17, 300 and 128 = two full chunks of keys), chunks after a prefix (40 of
    # 100, 1 of 33, 64 of 200) and a run of a single token
    lens, query_lens = [17, 100, 300, 33, 128, 200], [17, 40, 300, 1, 128, 64]
    case = make_case(lens, query_lens, block_size, heads, kv_heads, head_dim,
                     dtype=torch.bfloat16)
    scale = head_dim ** -0.5
    want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    got = _run(case, scale)
    assert got.dtype == torch.bfloat16 and got.shape == case.q.shape
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_the_prompt_op_routes_bfloat16_here_and_float32_elsewhere():
    from torch.profiler import profile

    from builtin_engine.kernels.paged_attention_ops import pack_long_runs, prefill_attention_op
    for dtype, here in ((torch.bfloat16, True), (torch.float32, False)):
        case = make_case([90, 130], [90, 50], 16, 9, 3, 64, dtype=dtype, seed=3)
        assert bf16_prefill_serves(case.k_cache, 64) == here
        long_meta, long_tables = pack_long_runs(case.meta, [0, 1])
        with profile() as prof:
            got = prefill_attention_op(case.q, case.k_cache, case.v_cache, long_meta,
                                       long_tables, 0.125)
        names = [e.key for e in prof.key_averages()]
        assert any("cpu_prefill_attention_bf16" in n for n in names) == here, names
        want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, 0.125)
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_bad_input_is_refused():
    case = make_case([20, 30], [20, 10], 16, 4, 2, 32, dtype=torch.bfloat16)
    m = case.meta
    args = (m.block_tables, m.query_start_loc, m.seq_lens, 0.1)
    with pytest.raises(RuntimeError, match="takes bfloat16 only"):
        bf16_prefill_attention(case.q.float(), case.k_cache, case.v_cache, *args)
    with pytest.raises(RuntimeError, match="head shapes disagree"):
        bf16_prefill_attention(case.q[:, :3], case.k_cache, case.v_cache, *args)
    with pytest.raises(RuntimeError, match="query starts must cover q"):
        bf16_prefill_attention(case.q[:5], case.k_cache, case.v_cache, *args)
    with pytest.raises(RuntimeError, match="exceeds its table"):
        bf16_prefill_attention(case.q, case.k_cache, case.v_cache, m.block_tables,
                              m.query_start_loc, torch.tensor([20, 3000]), 0.1)
