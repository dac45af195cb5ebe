"""Paged attention: the metadata every backend reads, and the torch reference.

KV cache layout (per layer): k_cache, v_cache of shape
[num_blocks, block_size, num_kv_heads, head_dim]. A token's slot is
block_id * block_size + offset. Queries are flattened over the batch: sequence i owns
q[query_start_loc[i]:query_start_loc[i+1]], and those tokens sit at the last
query_len positions of a context of seq_lens[i] tokens (cached prefix + new tokens).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64: where each new token's K/V is stored
    query_start_loc: torch.Tensor  # [batch + 1] int32, cumulative query lengths
    seq_lens: torch.Tensor  # [batch] int32: context length including this step's tokens
    block_tables: torch.Tensor  # [batch, max_blocks] int32, padded with 0
    query_lens: list[int]  # host copies, so loops never sync with the device
    seq_lens_list: list[int]
    max_query_len: int
    max_seq_len: int

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)


def store_kv_torch(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Write key/value [num_tokens, num_kv_heads, head_dim] into their slots."""
    _, _, heads, dim = k_cache.shape
    k_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
    v_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, value.to(v_cache.dtype))


def paged_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Causal attention of q [num_tokens, num_heads, head_dim] over the paged context."""
    if meta.is_pure_decode:
        return _decode_torch(q, k_cache, v_cache, meta, scale)
    if meta.max_query_len <= SHORT_QUERY:
        return _decode_torch(q, k_cache, v_cache, _as_decode(meta), scale)
    out = torch.empty_like(q)
    block_size = k_cache.shape[1]
    starts = meta.query_start_loc.tolist()
    short = [i for i, n in enumerate(meta.query_lens) if n <= SHORT_QUERY]
    if short:
        # Decode rows beside a prefill chunk (a mixed step) attend as one batch, as in a
        # decode step: one SDPA call each would cost a launch per row per layer.
        rows = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in short]).to(q.device)
        sub = _as_decode(select_sequences(meta, short))
        out[rows] = _decode_torch(q[rows], k_cache, v_cache, sub, scale)
    for i, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens_list)):
        if q_len <= SHORT_QUERY:
            continue
        n_blocks = (seq_len + block_size - 1) // block_size
        blocks = meta.block_tables[i, :n_blocks].long()
        k = k_cache[blocks].flatten(0, 1)[:seq_len]
        v = v_cache[blocks].flatten(0, 1)[:seq_len]
        qi = q[starts[i]:starts[i] + q_len]
        out[starts[i]:starts[i] + q_len] = _attend(qi, k, v, seq_len - q_len, scale)
    return out


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int,
            scale: float) -> torch.Tensor:
    """q [Q, Hq, D] attends causally to k/v [S, Hkv, D]; query j sits at position offset + j.

    4-D inputs in their own dtype, GQA left to SDPA: that is what takes CPU SDPA's flash
    kernel (fp32 accumulation, no [Hq, Q, S] score matrix). A 3-D call, an fp32 upcast or
    repeated KV heads ran its math path instead: 3-6x slower for 256-2048-token prompts,
    two thirds of a 2,048-token prefill step. A prompt's first chunk (offset 0) is plainly
    causal; a later chunk or one after a cached prefix needs the offset mask.
    """
    qh, kh, vh = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    gqa = q.shape[1] != k.shape[1]
    if offset == 0 and q.shape[0] == k.shape[0]:
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, is_causal=True, scale=scale, enable_gqa=gqa)
    else:
        q_pos = torch.arange(q.shape[0], device=q.device)[:, None] + offset
        mask = torch.arange(k.shape[0], device=q.device)[None, :] <= q_pos
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out[0].transpose(0, 1).to(q.dtype)


# Queries this short (decode steps carrying draft tokens) run as one decode row per token:
# query j of a sequence is a decode over its first seq_len - q_len + 1 + j tokens. That keeps
# verification batched instead of one masked attention call per sequence.
SHORT_QUERY = 16


def select_sequences(meta: AttentionMetadata, seqs: list[int]) -> AttentionMetadata:
    """The metadata of sequences `seqs` alone (their query rows renumbered from 0); the
    slot mapping is left out (attention never reads it: K/V are stored beforehand)."""
    device = meta.block_tables.device
    query_lens = [meta.query_lens[i] for i in seqs]
    starts = torch.zeros(len(seqs) + 1, dtype=torch.int32)
    starts[1:] = torch.cumsum(torch.tensor(query_lens), 0)
    lens = [meta.seq_lens_list[i] for i in seqs]
    index = torch.tensor(seqs, device=device)
    return AttentionMetadata(
        slot_mapping=meta.slot_mapping[:0], query_start_loc=starts.to(device),
        seq_lens=meta.seq_lens[index], block_tables=meta.block_tables[index],
        query_lens=query_lens, seq_lens_list=lens, max_query_len=max(query_lens),
        max_seq_len=max(lens))


def split_last_token(meta: AttentionMetadata, seq: int) -> AttentionMetadata:
    """The same attention with sequence `seq`'s last query token as a sequence of its own (a
    decode row over the whole context) after the rest of its run (a context one shorter).
    Token order and slots are unchanged: a step of prompts alone so gets the decode row the
    mixed graph needs."""
    q_len, s_len = meta.query_lens[seq], meta.seq_lens_list[seq]
    query_lens = meta.query_lens[:seq] + [q_len - 1, 1] + meta.query_lens[seq + 1:]
    lens = meta.seq_lens_list[:seq] + [s_len - 1, s_len] + meta.seq_lens_list[seq + 1:]
    device = meta.block_tables.device
    rows = torch.tensor(list(range(seq + 1)) + list(range(seq, len(meta.query_lens))),
                        device=device)
    starts = torch.zeros(len(query_lens) + 1, dtype=meta.query_start_loc.dtype)
    starts[1:] = torch.cumsum(torch.tensor(query_lens), 0)
    return AttentionMetadata(
        slot_mapping=meta.slot_mapping, query_start_loc=starts.to(device),
        seq_lens=torch.tensor(lens, dtype=meta.seq_lens.dtype, device=device),
        block_tables=meta.block_tables[rows], query_lens=query_lens, seq_lens_list=lens,
        max_query_len=max(query_lens), max_seq_len=max(lens))


def _as_decode(meta: AttentionMetadata) -> AttentionMetadata:
    """The same attention as per-token decode rows (each row's causal prefix as its context)."""
    lens = [s - q + 1 + j for q, s in zip(meta.query_lens, meta.seq_lens_list) for j in range(q)]
    device = meta.block_tables.device
    owner = torch.repeat_interleave(torch.arange(len(meta.query_lens), device=device),
                                    torch.tensor(meta.query_lens, device=device))
    n = len(lens)
    return AttentionMetadata(
        slot_mapping=meta.slot_mapping, query_start_loc=torch.arange(n + 1, device=device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
        block_tables=meta.block_tables[owner], query_lens=[1] * n, seq_lens_list=lens,
        max_query_len=1, max_seq_len=max(lens))


# Decode attends sequences in groups of similar length, each padded only to its own longest:
# one padded gather for the whole batch copies up to twice the K/V actually read, and copies
# that large fall out of cache. SDPA then reads the gathered blocks strided, with no permute.
DECODE_GROUP = 16


def _decode_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """One query token per sequence; sequences sorted by length, attended group by group."""
    lens = meta.seq_lens_list
    if len(lens) <= DECODE_GROUP:
        return _decode_group(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                             max(lens), scale)
    order = sorted(range(len(lens)), key=lens.__getitem__)
    out = torch.empty_like(q)
    for start in range(0, len(order), DECODE_GROUP):
        rows = order[start:start + DECODE_GROUP]
        idx = torch.tensor(rows, device=q.device)
        out[idx] = _decode_group(q[idx], k_cache, v_cache, meta.block_tables[idx],
                                 meta.seq_lens[idx], lens[rows[-1]], scale)
    return out


def _decode_group(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int,
                  scale: float) -> torch.Tensor:
    batch = q.shape[0]
    block_size, kv_heads, dim = k_cache.shape[1:]
    n_blocks = (max_len + block_size - 1) // block_size
    span = n_blocks * block_size
    tables = block_tables[:, :n_blocks].long()
    k = k_cache[tables].view(batch, span, kv_heads, dim).transpose(1, 2).float()
    v = v_cache[tables].view(batch, span, kv_heads, dim).transpose(1, 2).float()
    group = q.shape[1] // kv_heads
    qg = q.float().view(batch, kv_heads, group, dim)  # a group's query heads share a KV head
    valid = torch.arange(span, device=q.device)[None, :] < seq_lens[:, None].to(q.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        qg, k, v, attn_mask=valid[:, None, None, :], scale=scale)
    return out.reshape(batch, kv_heads * group, dim).to(q.dtype)
