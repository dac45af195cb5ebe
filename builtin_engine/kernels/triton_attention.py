"""Triton paged attention entry point: the split-KV decode kernel for pure-decode batches,
the one-launch prefill/extend kernel for everything else (it also serves decode rows mixed
into a prefill batch)."""
from __future__ import annotations

import torch

from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.kernels.decode_attention import paged_decode_attention_triton
from builtin_engine.kernels.prefill_attention import paged_prefill_attention_triton


def paged_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           meta: AttentionMetadata, scale: float) -> torch.Tensor:
    if q.stride(-1) != 1:
        q = q.contiguous()
    if meta.is_pure_decode:
        return paged_decode_attention_triton(q, k_cache, v_cache, meta, scale)
    return paged_prefill_attention_triton(q, k_cache, v_cache, meta, scale)
