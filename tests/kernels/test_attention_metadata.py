"""Reshaping a step's attention metadata without changing its attention: one sequence's last
query token split off as a decode row of its own, a subset of sequences selected, and a
mixed batch (decode rows beside prompt runs) attended in one call, all against the torch
reference on the unchanged metadata."""
import torch

from builtin_engine.kernels.attention import (paged_attention_torch, select_sequences,
                                              split_last_token)
from tests.kernels.paged_case import make_case


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
