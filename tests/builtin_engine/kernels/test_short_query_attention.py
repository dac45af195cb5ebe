"""Short queries (decode steps carrying drafts) attended as per-token decode rows equal the
per-sequence causal attention they replace."""
from __future__ import annotations

import pytest
import torch

from builtin_engine.kernels import attention
from tests.builtin_engine.kernels.paged_case import make_case


@pytest.mark.parametrize("seq_lens, query_lens", [
    ([40], [6]), ([17, 64, 5, 33], [3, 1, 5, 16]), ([16] * 20, [2] * 20)])
def test_short_query_path_matches_per_sequence_attention(monkeypatch, seq_lens, query_lens):
    case = make_case(seq_lens, query_lens, block_size=8, num_heads=9, kv_heads=3, head_dim=16,
                     seed=len(seq_lens))
    attention.store_kv_torch(case.key, case.value, case.k_cache, case.v_cache,
                             case.meta.slot_mapping)
    fast = attention.paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, 0.25)
    monkeypatch.setattr(attention, "SHORT_QUERY", 0)  # force the per-sequence loop
    slow = attention.paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, 0.25)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
