"""Decode steps through one torch.compile'd (inductor) decoder layer, on any device.

    compiled = CompiledDecode(model, kv_caches, cache_dir)   # compiles nothing yet
    compiled.warm_up()                                      # bounded: two batch shapes
    if compiled.accepts(meta, lora):
        hidden = compiled.forward(input_ids, positions, meta)

What it fuses (the eager CPU profile of a batch-64 decode step: KV gather 36%, matmuls
20%, norm/rotary/activation 16%, SDPA 13%, glue 12%):
- attention reads the paged cache in place, block by block: each (row, block) pair the
  contexts cover gives a partial softmax whose loads go through the block id, and each row
  merges its partials, so no [batch, context] copy of K/V is made and a short context in a
  batch of long ones costs its own blocks only, not the longest row's (BlockPlan);
- residual add + RMSNorm, rotary and SiLU-and-mul become one loop each around the matmuls
  (which stay oneDNN/MKL calls, as in eager);
- the KV store is an opaque custom op that mutates the cache (vLLM's way): inductor neither
  clones the cache nor reorders the store after the reads.
Every layer calls the same compiled function with its own weights and cache as inputs, so
one compilation serves all layers. Shapes are dynamic (batch rows, blocks read, block-table
width): warm-up compiles the one graph and checks it is reused, and every later step
reuses it. Steps whose queries are all short (decode, speculative verification rows,
as in `attention._as_decode`) take this path; prefill and LoRA steps stay eager.
Compiled kernels are cached under `cache_dir` (TORCHINDUCTOR_CACHE_DIR), so a restart
loads them instead of compiling again.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from typing import NamedTuple

import torch

from .kernels.activation import silu_and_mul_torch
from .kernels.attention import SHORT_QUERY, AttentionMetadata, _as_decode
from .kernels.layernorm import rms_norm_torch as rms_norm
from .kernels.rotary import _rotate as rotary
from .quantization import Int8Weight

logger = logging.getLogger(__name__)


@torch.library.custom_op("inferplane::store_kv", mutates_args=("k_cache", "v_cache"))
def store_kv_op(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """key/value [T, Hk, D] into caches [blocks, block_size, Hk, D] at slot_mapping."""
    _, _, heads, dim = k_cache.shape
    k_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
    v_cache.view(-1, heads, dim).index_copy_(0, slot_mapping, value.to(v_cache.dtype))


@store_kv_op.register_fake
def _(key, value, k_cache, v_cache, slot_mapping) -> None:
    return None


def linear(x, weight):
    """weight: a tensor, or (int8 values, scale) for a weight-only int8 projection."""
    if isinstance(weight, tuple):
        values, scale = weight
        return torch.nn.functional.linear(x, values.to(x.dtype)) * scale
    return torch.nn.functional.linear(x, weight)


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
        return cls(table[covered], rows[covered], fill[covered], index)


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


def decode_layer(hidden, residual, cos, sin, k_cache, v_cache, slot_mapping, plan: BlockPlan,
                 w: dict, eps: float, heads: int, kv_heads: int, head_dim: int,
                 scale: float):
    """One Llama decoder layer for decode rows; returns (hidden, residual)."""
    hidden, residual = rms_norm(hidden, w["input_norm"], eps, residual)
    tokens = hidden.shape[0]
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    q, k, v = linear(hidden, w["qkv_proj"]).split([q_size, kv_size, kv_size], dim=-1)
    q = rotary(q.reshape(tokens, heads, head_dim), cos, sin)
    k = rotary(k.reshape(tokens, kv_heads, head_dim), cos, sin)
    store_kv_op(k, v.reshape(tokens, kv_heads, head_dim), k_cache, v_cache, slot_mapping)
    attn = paged_decode_attention(q, k_cache, v_cache, plan, scale)
    hidden = linear(attn.reshape(tokens, q_size), w["o_proj"])
    hidden, residual = rms_norm(hidden, w["post_norm"], eps, residual)
    act = silu_and_mul_torch(linear(hidden, w["gate_up_proj"]))
    return linear(act, w["down_proj"]), residual


def _layer_weights(layer) -> dict:
    def weight(name):
        value = getattr(layer, name)
        return (value.values, value.scale) if isinstance(value, Int8Weight) else value

    return {n: weight(n) for n in ("input_norm", "qkv_proj", "o_proj", "post_norm",
                                   "gate_up_proj", "down_proj")}


@functools.cache
def compiled_layer():
    """One compiled wrapper per process: every runner (and layer) shares its graphs.

    Fused kernels keep a bfloat16/float16 value in float32 from one op to the next unless
    asked to round it where eager does (emulate_precision_casts). Asked, a half-precision
    model computes what its eager path computes, but for the order of attention's sums; not
    asked, every fused op drifts from it (greedy text parted from eager's at the first
    token). In float32 the option changes nothing."""
    return torch.compile(decode_layer, fullgraph=True,
                         options={"emulate_precision_casts": True})


def default_cache_dir() -> str:
    """Where compiled kernels persist: $INFERPLANE_DATA_DIR/inductor, else ~/.cache."""
    root = os.environ.get("INFERPLANE_DATA_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "inferplane")
    return os.path.join(root, "inductor")


class CompiledDecode:
    def __init__(self, model, kv_caches, cache_dir: str | None = None):
        self.model = model
        self.kv_caches = kv_caches
        self.cache_dir = cache_dir or default_cache_dir()
        os.makedirs(self.cache_dir, exist_ok=True)
        # Inductor reads it when it compiles. An explicit directory wins; otherwise one the
        # operator exported before start wins over the default.
        if cache_dir:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.cache_dir
        else:
            self.cache_dir = os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", self.cache_dir)
        cfg = model.cfg
        self.consts = dict(eps=cfg.rms_eps, heads=cfg.num_heads, kv_heads=cfg.num_kv_heads,
                           head_dim=cfg.head_dim, scale=model.layers[0].scale)
        self.weights = [_layer_weights(layer) for layer in model.layers]
        self.layer = compiled_layer()
        self.warm_up_s: float | None = None
        self.mark_dynamic = True  # until warm-up has compiled the one dynamic graph
        self.model_block_size = kv_caches[0][0].shape[1]

    @staticmethod
    def accepts(meta: AttentionMetadata, lora) -> bool:
        return lora is None and meta.max_query_len <= SHORT_QUERY

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        """Final-normed hidden states [tokens, hidden], as the model's own forward."""
        if not meta.is_pure_decode:
            meta = _as_decode(meta)  # each draft row attends to its own causal prefix
        rows = input_ids.shape[0]
        slots = meta.slot_mapping
        tables, lens = meta.block_tables, meta.seq_lens
        if rows == 1:
            # One graph serves every batch: a size-1 dimension would get its own
            # specialisation (and compile). The twin row writes the same K/V to the same slot.
            input_ids, positions, slots, tables, lens = (
                torch.cat([t, t]) for t in (input_ids, positions, slots, tables, lens))
        else:
            # A fresh copy made here (under inference mode, as every caller runs) so the
            # guards see the same kind of tensor whether or not the caller built it so.
            slots = slots.clone()
        plan = BlockPlan.build(tables, lens, self.model_block_size)
        if self.mark_dynamic:
            for t in (input_ids, positions, slots, *plan):
                torch._dynamo.mark_dynamic(t, 0)
            torch._dynamo.mark_dynamic(plan.index, 1)
        model = self.model
        cos, sin = model.cos_sin_cache[positions].float().chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        hidden = torch.nn.functional.embedding(input_ids, model.embed_tokens)
        # x + 0 == x exactly, so a zero residual lets layer 0 share the others' graph.
        residual = torch.zeros_like(hidden)
        if self.mark_dynamic:
            for t in (hidden, residual, cos, sin):
                torch._dynamo.mark_dynamic(t, 0)
        for w, (k_cache, v_cache) in zip(self.weights, self.kv_caches):
            hidden, residual = self.layer(hidden, residual, cos, sin, k_cache, v_cache,
                                          slots, plan, w, **self.consts)
        return rms_norm(hidden, model.norm, model.cfg.rms_eps, residual)[0][:rows]

    def warm_up(self) -> float:
        """Compile the one graph (rows and block-table width dynamic) before serving, on a
        scratch slot of block 0 that no request holds yet; a second, wider call checks that
        it is reused. Returns the seconds taken (a cache hit loads in a few)."""
        started = time.monotonic()
        device = self.model.embed_tokens.device
        with torch.inference_mode():
            # Rows, block-table width and block count all differ (2/3/5, then 3/4/9): sizes
            # equal at tracing would be given one symbol, and a guard that they stay equal.
            block = self.model_block_size
            for rows in (2, 3):
                lens = [(i + 1) * block + 1 for i in range(rows)]
                meta = AttentionMetadata(
                    slot_mapping=torch.zeros(rows, dtype=torch.int64, device=device),
                    query_start_loc=torch.arange(rows + 1, dtype=torch.int32, device=device),
                    seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
                    block_tables=torch.zeros(rows, rows + 1, dtype=torch.int32, device=device),
                    query_lens=[1] * rows, seq_lens_list=lens, max_query_len=1,
                    max_seq_len=lens[-1])
                ids = torch.zeros(rows, dtype=torch.int64, device=device)
                self.forward(ids, torch.zeros_like(ids), meta)
                self.mark_dynamic = False
        self.warm_up_s = time.monotonic() - started
        logger.info("compiled decode step in %.1fs (cache %s)", self.warm_up_s, self.cache_dir)
        return self.warm_up_s


def build_compiled_decode(config, model, kv_caches) -> CompiledDecode | None:
    """The compiled decode step the config asks for, warmed up; None for eager decode."""
    wanted, _ = config.resolved_compile()
    if not wanted or not kv_caches:
        return None
    compiled = CompiledDecode(model, kv_caches, config.compile_cache_dir)
    compiled.warm_up()
    return compiled
