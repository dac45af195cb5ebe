"""Attention pieces the compiled steps trace: the KV store and prefill attention as opaque
ops, decode attention as plain torch that inductor fuses into loads over the paged cache.

    step_ops.define_step_ops()                               # once, before tracing
    store_kv_op(k, v, k_cache, v_cache, slot_mapping)        # mutates the caches in place
    plan = BlockPlan.build(block_tables, seq_lens, block_size)
    out = paged_decode_attention(q, k_cache, v_cache, plan, scale)     # one query row each
    long_meta, long_tables = pack_long_runs(meta, seqs)
    out = prefill_attention_op(q, k_cache, v_cache, long_meta, long_tables, scale)

Decode attention is traced: each (row, block) pair the contexts cover gives a partial softmax
whose loads go through the block id, and each row merges its partials, so no [batch, context]
copy of K/V is made (paged attention v2). Prefill attention is an opaque op instead: its
per-sequence lengths are data (one causal SDPA call per long sequence), and traced they would
either specialise the graph on every length or need a dynamic loop inductor cannot build.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from builtin_engine.kernels.attention import AttentionMetadata, paged_attention_torch
from builtin_engine.kernels.cpu_prefill_attention import cpu_prefill_attention_serves


def store_kv_op(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """key/value [T, Hk, D] into caches [blocks, block_size, Hk, D] at slot_mapping: the op
    `inferplane::store_kv` (kernels/step_ops.py; `define_step_ops()` first)."""
    torch.ops.inferplane.store_kv(key, value, k_cache, v_cache, slot_mapping)


class BlockPlan(NamedTuple):
    """The blocks a decode batch actually reads, for `paged_decode_attention`.

        plan = BlockPlan.build(block_tables, seq_lens, block_size)

    blocks/rows/fill [P]: every (row, block) pair the contexts cover, row by row, with the
    block id, its row and how many of its slots hold context (block_size but for a row's
    last block). index [B, W]: row i's pairs in order; columns past its last block hold -1.
    P is sum(ceil(seq_len / block_size)), so a batch of short and long contexts reads only
    what each row holds, not every row padded to the longest.
    """
    blocks: torch.Tensor
    rows: torch.Tensor
    fill: torch.Tensor
    index: torch.Tensor
    tables: torch.Tensor  # [B, W >= 2] int32 block tables, for the C++ kernel
    lens: torch.Tensor  # [B] int32 context lengths, for the C++ kernel

    @classmethod
    def build(cls, block_tables: torch.Tensor, seq_lens: torch.Tensor,
              block_size: int) -> "BlockPlan":
        width = block_tables.shape[1]
        lens = seq_lens.long()
        used = -(-lens // block_size)
        # Two columns at least: a width-1 dimension would get its own graph specialisation.
        cols = torch.arange(max(width, 2), device=lens.device)
        covered = cols[None, :] < used[:, None]
        table = block_tables.long()
        if width < cols.numel():
            table = torch.cat([table, table[:, :1]], dim=1)
        starts = torch.cumsum(used, 0) - used
        fill = (lens[:, None] - cols[None, :] * block_size).clamp(max=block_size)
        rows = torch.arange(lens.numel(), device=lens.device)[:, None].expand_as(covered)
        index = torch.where(covered, starts[:, None] + cols[None, :], -1)
        return cls(table[covered], rows[covered], fill[covered], index,
                   table.int(), lens.int())


def decode_attention(q, k_cache, v_cache, plan: BlockPlan, scale: float, cpu_kernel: bool):
    """The C++ kernel (kernels/cpu_decode_attention.py) where it is built, else the traced
    maths below; `cpu_kernel` is a constant of the graph."""
    if cpu_kernel:
        return torch.ops.inferplane.cpu_decode_attention(q, k_cache, v_cache, plan.tables,
                                                         plan.lens, scale)
    return paged_decode_attention(q, k_cache, v_cache, plan, scale)


def paged_decode_attention(q, k_cache, v_cache, plan: BlockPlan, scale: float):
    """One query row per sequence over its paged context, block by block (paged attention
    v2): each (row, block) pair of the plan yields a partial softmax (max, sum, weighted V)
    over its filled slots, and each row merges its pairs' partials. Under compile the block
    gathers are loads inside the reductions, never a copy of K/V.

    q [B, Hq, D]; caches [blocks, block_size, Hk, D].
    """
    batch, q_heads, dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    group = q_heads // kv_heads
    # Slots last, so each softmax reduction runs over the innermost dimension: reduced over
    # an outer one, inductor split each block's 16 slots across threads (measured 2.7x
    # slower at batch 64).
    k = k_cache[plan.blocks].float().transpose(1, 2)  # [P, Hk, block_size, D]
    v = v_cache[plan.blocks].float().transpose(1, 2)
    qg = q.float().view(batch, kv_heads, group, dim)[plan.rows]  # [P, Hk, G, D]
    scores = (qg.unsqueeze(3) * k.unsqueeze(2)).sum(-1) * scale  # [P, Hk, G, block_size]
    slot = torch.arange(block_size, device=q.device)
    empty = (slot[None, :] >= plan.fill[:, None])[:, None, None, :]
    scores = scores.masked_fill(empty, float("-inf"))
    peak = scores.amax(-1, keepdim=True)  # finite: every pair has a filled slot
    weights = torch.exp(scores - peak)
    total = weights.sum(-1)  # [P, Hk, G]
    partial = (weights.unsqueeze(-1) * v.unsqueeze(2)).sum(3)  # [P, Hk, G, D]
    # Merge: rescale each partial to the row's overall max; columns past a row's last
    # block (index -1) weigh nothing.
    valid = (plan.index >= 0)[:, :, None, None]  # [B, W, 1, 1]
    idx = plan.index.clamp(min=0)
    peaks = peak.squeeze(-1)[idx].masked_fill(~valid, float("-inf"))  # [B, W, Hk, G]
    scale_by = torch.exp(peaks - peaks.amax(1, keepdim=True))
    out = (scale_by.unsqueeze(-1) * partial[idx]).sum(1)
    out = out / (scale_by * total[idx]).sum(1).unsqueeze(-1)
    return out.reshape(batch, q_heads, dim).to(q.dtype)


def pack_long_runs(meta: AttentionMetadata, seqs: list[int]) -> tuple[torch.Tensor,
                                                                       torch.Tensor]:
    """(long_meta, long_tables) for `prefill_attention_op`: sequences `seqs` of `meta` as one
    int64 vector [L, W, query starts (L + 1), seq lens (L)] and their block tables flattened
    [L * W]. Vectors rather than [L] tensors: a graph input whose size can be 1 would be
    specialised on it (one prompt per step is the common case), and these are never < 2."""
    lens = [meta.seq_lens_list[i] for i in seqs]
    starts = [0]
    for i in seqs:
        starts.append(starts[-1] + meta.query_lens[i])
    tables = meta.block_tables[torch.tensor(seqs, device=meta.block_tables.device)]
    width = max(2, tables.shape[1])  # a long run covers two blocks or more anyway
    if tables.shape[1] < width:
        tables = torch.nn.functional.pad(tables, (0, width - tables.shape[1]))
    long_meta = torch.tensor([len(seqs), width, *starts, *lens], dtype=torch.int64)
    return long_meta.to(tables.device), tables.reshape(-1).contiguous()


@torch.library.custom_op("inferplane::prefill_attention", mutates_args=())
def prefill_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         long_meta: torch.Tensor, long_tables: torch.Tensor,
                         scale: float) -> torch.Tensor:
    """Causal attention of long query runs q [T, Hq, D] over their paged contexts (their
    K/V already stored), described by `pack_long_runs`: the C++ kernel where it serves
    (kernels/cpu_prefill_attention.py: AVX-512 CPUs), else one SDPA call per run. Runs
    eagerly, so the host copies below never enter a graph."""
    values = long_meta.tolist()
    count, width = values[0], values[1]
    starts, lens = values[2:3 + count], values[3 + count:3 + 2 * count]
    device = q.device
    tables = long_tables.view(count, width)
    if cpu_prefill_attention_serves(k_cache, q.shape[-1]):
        return torch.ops.inferplane.cpu_prefill_attention(
            q, k_cache, v_cache, tables, long_meta[2:3 + count], long_meta[3 + count:], scale)
    meta = AttentionMetadata(
        slot_mapping=long_meta[:0], query_start_loc=torch.tensor(starts, device=device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device), block_tables=tables,
        query_lens=[b - a for a, b in zip(starts, starts[1:])], seq_lens_list=lens,
        max_query_len=max(b - a for a, b in zip(starts, starts[1:])), max_seq_len=max(lens))
    return paged_attention_torch(q, k_cache, v_cache, meta, scale)


@prefill_attention_op.register_fake
def _(q, k_cache, v_cache, long_meta, long_tables, scale):
    return torch.empty_like(q)
