"""Paged decode attention, split-KV (flash-decoding), Triton; reference: paged_attention_torch.

One query token per sequence. Phase 1 runs a program per (sequence, KV head, split): it
packs the GROUP query heads that share the KV head into one tile (GQA reads each K/V row
once for the whole group), walks its slice of the context through the block table in
BLOCK_N-token tiles (any block size; the last block may be partial) and keeps an online
softmax. Phase 2 merges the splits with their log-sum-exp. With one split phase 1 writes the
output directly. The grid depends only on (batch, KV heads, splits), never on the sequence
lengths, so a captured CUDA graph stays valid as sequences grow.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels import jit
from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.kernels.jit import cdiv, launch_grid, lazy_jit, next_power_of_2

tl = jit.LANGUAGE
LOG2E = 1.4426950408889634


@lazy_jit
def _decode_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                         out_ptr, part_out_ptr, part_lse_ptr, scale_log2, q_stride_t,
                         q_stride_h, out_stride_t, out_stride_h, cache_s0, cache_s1, cache_s2,
                         table_stride, block_size, group, head_dim, num_splits,
                         SINGLE_SPLIT: tl.constexpr, GROUP_PAD: tl.constexpr,
                         BLOCK_N: tl.constexpr, D_PAD: tl.constexpr, PRECISION: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    split_len = tl.cdiv(seq_len, num_splits)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]
    q = tl.load(q_ptr + seq * q_stride_t + heads[:, None] * q_stride_h + d[None, :],
                mask=q_mask, other=0.0)

    m_i = tl.full([GROUP_PAD], -1e30, dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], dtype=tl.float32)
    for tile in range(start, end, BLOCK_N):
        n = tile + tl.arange(0, BLOCK_N)
        valid = n < end
        block = tl.load(block_tables_ptr + seq * table_stride + n // block_size,
                        mask=valid, other=0).to(tl.int64)
        row = block * cache_s0 + (n % block_size) * cache_s1 + kv_head * cache_s2
        kv_mask = valid[:, None] & (d < head_dim)[None, :]
        k = tl.load(k_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k).to(q.dtype), input_precision=PRECISION) * scale_log2
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    if SINGLE_SPLIT:
        tl.store(out_ptr + seq * out_stride_t + heads[:, None] * out_stride_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        # natural-log lse of this split; -inf marks an empty split
        lse = tl.where(l_i > 0, (m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0))) * 0.6931471805599453,
                       float("-inf"))
        part_row = (seq * tl.num_programs(1) * group + heads) * num_splits + split
        tl.store(part_lse_ptr + part_row, lse, mask=g < group)
        tl.store(part_out_ptr + part_row[:, None] * D_PAD + d[None, :], out, mask=q_mask)


@lazy_jit
def _decode_reduce_kernel(part_out_ptr, part_lse_ptr, out_ptr, out_stride_t, out_stride_h,
                          num_heads, head_dim, num_splits, SPLITS_PAD: tl.constexpr,
                          D_PAD: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, D_PAD)
    base = (seq * num_heads + head) * num_splits
    lse = tl.load(part_lse_ptr + base + s, mask=s < num_splits, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)  # padded rows with no context stay finite
    weights = tl.exp(lse - top)
    parts = tl.load(part_out_ptr + (base + s)[:, None] * D_PAD + d[None, :],
                    mask=(s < num_splits)[:, None], other=0.0)
    total = tl.sum(weights, axis=0)
    out = tl.sum(parts * weights[:, None], axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * out_stride_t + head * out_stride_h + d,
             out.to(out_ptr.dtype.element_ty), mask=d < head_dim)


def choose_num_splits(batch: int, kv_heads: int, max_seq_len: int,
                      device: torch.device, min_tokens_per_split: int = 256) -> int:
    """Enough splits to give every SM a couple of programs, but not splits of a few tokens."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    wanted = cdiv(2 * sms, max(batch * kv_heads, 1))
    return max(1, min(wanted, cdiv(max_seq_len, min_tokens_per_split), 64))


def paged_decode_attention_triton(q: torch.Tensor, k_cache: torch.Tensor,
                                  v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
                                  num_splits: int | None = None,
                                  block_n: int | None = None) -> torch.Tensor:
    """q [batch, Hq, D] (one token per sequence) -> [batch, Hq, D] in q's dtype."""
    batch, num_heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    if num_heads % kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {kv_heads} KV heads")
    group = num_heads // kv_heads
    if num_splits is None:
        num_splits = choose_num_splits(batch, kv_heads, meta.max_seq_len, q.device)
    out = torch.empty_like(q)
    if batch == 0:
        return out
    d_pad = max(16, next_power_of_2(head_dim))
    parts_shape = (batch * num_heads * num_splits,) if num_splits > 1 else (1,)
    part_lse = torch.empty(parts_shape, dtype=torch.float32, device=q.device)
    part_out = torch.empty((parts_shape[0], d_pad), dtype=torch.float32, device=q.device)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    launch_grid(_decode_split_kernel, (batch, kv_heads, num_splits), q, k_cache, v_cache,
                meta.block_tables, meta.seq_lens, out, part_out, part_lse, scale * LOG2E,
                q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(0),
                k_cache.stride(1), k_cache.stride(2), meta.block_tables.stride(0), block_size,
                group, head_dim, num_splits, SINGLE_SPLIT=num_splits == 1,
                GROUP_PAD=max(16, next_power_of_2(group)), BLOCK_N=block_n or 32, D_PAD=d_pad,
                PRECISION=precision)
    if num_splits > 1:
        launch_grid(_decode_reduce_kernel, (batch, num_heads), part_out, part_lse, out,
                    out.stride(0), out.stride(1), num_heads, head_dim, num_splits,
                    SPLITS_PAD=next_power_of_2(num_splits), D_PAD=d_pad)
    return out
