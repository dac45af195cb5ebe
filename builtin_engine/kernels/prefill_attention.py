"""Paged prefill/extend attention for a whole flattened batch in one launch (Triton).

Reference: `attention.paged_attention_torch`. Sequence i owns the query rows
q[query_start_loc[i] : query_start_loc[i+1]]; those rows sit at the last query_len positions
of a context of seq_lens[i] tokens whose first seq_len - query_len tokens (the cached prefix)
are already in the paged cache, and this step's K/V must be stored before the call. Grid:
(sequence, query tile of BLOCK_M rows, query head); tiles past a sequence's query length exit
at once, so mixed lengths (and decode rows) share the launch. Each program runs a causal
online softmax over KV tiles gathered through the block table, stopping at its last row's
position, so a cached prefix costs reads but never extra launches.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels import jit
from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.kernels.jit import cdiv, launch_grid, lazy_jit, next_power_of_2

tl = jit.LANGUAGE
LOG2E = 1.4426950408889634


@lazy_jit
def _prefill_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                    query_start_ptr, out_ptr, scale_log2, q_stride_t, q_stride_h,
                    out_stride_t, out_stride_h, cache_s0, cache_s1, cache_s2, table_stride,
                    block_size, group, head_dim, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    D_PAD: tl.constexpr, PRECISION: tl.constexpr):
    seq = tl.program_id(0)
    tile_m = tl.program_id(1)
    head = tl.program_id(2)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    if tile_m * BLOCK_M < q_len:
        seq_len = tl.load(seq_lens_ptr + seq)
        prefix = seq_len - q_len
        kv_head = head // group
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < q_len
        q_pos = prefix + rows
        d = tl.arange(0, D_PAD)
        d_ok = d < head_dim
        q_off = (q_start + rows)[:, None] * q_stride_t + head * q_stride_h + d[None, :]
        q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

        m_i = tl.full([BLOCK_M], -1e30, dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
        kv_end = tl.minimum(seq_len, prefix + (tile_m + 1) * BLOCK_M)  # causal bound
        for tile in range(0, kv_end, BLOCK_N):
            n = tile + tl.arange(0, BLOCK_N)
            n_ok = n < kv_end
            block = tl.load(block_tables_ptr + seq * table_stride + n // block_size,
                            mask=n_ok, other=0).to(tl.int64)
            kv_row = block * cache_s0 + (n % block_size) * cache_s1 + kv_head * cache_s2
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_cache_ptr + kv_row[:, None] + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + kv_row[:, None] + d[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k).to(q.dtype), input_precision=PRECISION) * scale_log2
            visible = (n[None, :] <= q_pos[:, None]) & n_ok[None, :]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        o_off = (q_start + rows)[:, None] * out_stride_t + head * out_stride_h + d[None, :]
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])


def paged_prefill_attention_triton(q: torch.Tensor, k_cache: torch.Tensor,
                                   v_cache: torch.Tensor, meta: AttentionMetadata,
                                   scale: float, block_m: int | None = None,
                                   block_n: int | None = None) -> torch.Tensor:
    """q [num_tokens, Hq, D] flattened over the batch -> [num_tokens, Hq, D] in q's dtype."""
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    if num_heads % kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {kv_heads} KV heads")
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    on_gpu = q.device.type == "cuda"
    block_m = block_m or (64 if on_gpu else 16)
    block_n = block_n or (32 if on_gpu else 16)
    grid = (meta.num_seqs, cdiv(meta.max_query_len, block_m), num_heads)
    launch_grid(_prefill_kernel, grid, q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                meta.query_start_loc, out, scale * LOG2E, q.stride(0), q.stride(1),
                out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1),
                k_cache.stride(2), meta.block_tables.stride(0), block_size,
                num_heads // kv_heads, head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
                D_PAD=max(16, next_power_of_2(head_dim)),
                PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    return out
