"""Random paged-KV batches for the attention kernel tests."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from builtin_engine.kernels.attention import AttentionMetadata


@dataclass
class PagedCase:
    q: torch.Tensor  # [num_tokens, Hq, D]
    key: torch.Tensor  # this step's K/V rows [num_tokens, Hk, D]
    value: torch.Tensor
    k_cache: torch.Tensor  # [num_blocks, block_size, Hk, D]
    v_cache: torch.Tensor
    meta: AttentionMetadata


def make_case(seq_lens: list[int], query_lens: list[int], block_size: int, num_heads: int,
              kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32,
              seed: int = 0, device: str = "cpu") -> PagedCase:
    """Each sequence's blocks are scattered (shuffled ids) so that tables really index."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3  # spare blocks stay random garbage
    ids = torch.randperm(num_blocks, generator=gen).int()
    width = max(blocks_per_seq)
    tables = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    slots, taken = [], 0
    for i, (n, s, q_len) in enumerate(zip(blocks_per_seq, seq_lens, query_lens)):
        tables[i, :n] = ids[taken:taken + n]
        taken += n
        for pos in range(s - q_len, s):
            slots.append(int(tables[i, pos // block_size]) * block_size + pos % block_size)

    values = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):  # drawn on the target device: GPU-sized caches need no host copy
        return torch.randn(*shape, generator=values, device=device, dtype=torch.float32).to(dtype)

    total = sum(query_lens)
    starts = torch.tensor([0] + query_lens).cumsum(0).to(torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        query_start_loc=starts.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=tables.to(device), query_lens=list(query_lens),
        seq_lens_list=list(seq_lens), max_query_len=max(query_lens),
        max_seq_len=max(seq_lens))
    return PagedCase(q=randn(total, num_heads, head_dim), key=randn(total, kv_heads, head_dim),
                     value=randn(total, kv_heads, head_dim),
                     k_cache=randn(num_blocks, block_size, kv_heads, head_dim),
                     v_cache=randn(num_blocks, block_size, kv_heads, head_dim), meta=meta)
