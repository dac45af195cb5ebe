"""Reshaping a step's attention metadata without changing its attention: one sequence's last
query token split off as a decode row of its own, a subset of sequences selected, and a
mixed batch (decode rows beside prompt runs) attended in one call, all against the torch
reference on the unchanged metadata."""
import torch

from builtin_engine.kernels.attention import (paged_attention_torch, select_sequences,
                                               split_last_token)
from tests.builtin_engine.kernels.paged_case import make_case


def test_split_last_token_attends_the_same():
    case = make_case([40, 70, 25], [30, 70, 20], 16, 6, 2, 32)
    scale = 32 ** -0.5
    want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    for seq in range(3):
        split = split_last_token(case.meta, seq)
        assert split.num_seqs == 4 and split.query_lens[seq + 1] == 1
        assert split.seq_lens_list[seq + 1] == case.meta.seq_lens_list[seq]
        got = paged_attention_torch(case.q, case.k_cache, case.v_cache, split, scale)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_select_sequences_gives_their_rows_alone():
    case = make_case([40, 9, 25], [30, 1, 20], 16, 4, 4, 32)
    scale = 0.2
    want = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    sub = select_sequences(case.meta, [0, 2])
    rows = torch.cat([torch.arange(0, 30), torch.arange(31, 51)])
    got = paged_attention_torch(case.q[rows], case.k_cache, case.v_cache, sub, scale)
    torch.testing.assert_close(got, want[rows], atol=1e-5, rtol=1e-5)


def test_mixed_batch_matches_each_sequence_attended_alone():
    # Decode rows (query 1), a short draft run (3) and a long prompt run (40) in one step.
    case = make_case([12, 50, 40, 33], [1, 3, 40, 1], 16, 6, 3, 32)
    scale = 0.15
    got = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
    starts = [0, 1, 4, 44, 45]
    for seq in range(4):
        alone = select_sequences(case.meta, [seq])
        rows = slice(starts[seq], starts[seq + 1])
        want = paged_attention_torch(case.q[rows], case.k_cache, case.v_cache, alone, scale)
        torch.testing.assert_close(got[rows], want, atol=1e-5, rtol=1e-5)


def _reference(q, k, v, offset, scale):
    """float64 causal attention of q [Q, Hq, D] over k/v [S, Hk, D], query j at offset + j."""
    group = q.shape[1] // k.shape[1]
    qh = q.double().transpose(0, 1)
    kh = k.double().transpose(0, 1).repeat_interleave(group, 0)
    vh = v.double().transpose(0, 1).repeat_interleave(group, 0)
    scores = qh @ kh.transpose(1, 2) * scale
    visible = torch.arange(k.shape[0])[None, :] <= torch.arange(q.shape[0])[:, None] + offset
    scores = scores.masked_fill(~visible, float("-inf"))
    return (scores.softmax(-1) @ vh).transpose(0, 1)


def test_prompt_runs_take_the_cpu_flash_kernel_in_their_own_dtype():
    """A prompt's first chunk (plain causal) and a later chunk (offset mask) both run CPU
    SDPA's flash kernel, with GQA, and match float64 attention. Before, a 3-D float32 call
    with repeated KV heads took the math kernel: 3-6x slower on 256-2,048-token prompts."""
    from torch.profiler import profile
    scale = 64 ** -0.5
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        # seq 0: a 90-token prompt from position 0; seq 1: its 40-token chunk after 60 cached
        case = make_case([90, 100], [90, 40], 16, 9, 3, 64, dtype=dtype, seed=5)
        with profile() as prof:
            got = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, scale)
        names = {e.key for e in prof.key_averages()}
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
        assert "aten::_scaled_dot_product_attention_math" not in names
        assert got.dtype == dtype
        for seq, (start, q_len) in enumerate(((0, 90), (90, 40))):
            seq_len = case.meta.seq_lens_list[seq]
            blocks = case.meta.block_tables[seq, :-(-seq_len // 16)].long()
            k = case.k_cache[blocks].flatten(0, 1)[:seq_len]
            v = case.v_cache[blocks].flatten(0, 1)[:seq_len]
            want = _reference(case.q[start:start + q_len], k, v, seq_len - q_len, scale)
            torch.testing.assert_close(got[start:start + q_len].double(), want, atol=tol,
                                       rtol=tol)
