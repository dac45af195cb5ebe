"""Decode steps through one torch.compile'd (inductor) decoder layer, on any device.

    compiled = CompiledDecode(model, kv_caches, cache_dir)   # compiles nothing yet
    compiled.warm_up(max_blocks)                            # bounded: two batch shapes
    if compiled.accepts(meta, lora):
        hidden = compiled.forward(input_ids, positions, meta)

What it fuses (the eager CPU profile of a batch-64 decode step: KV gather 36%, matmuls
20%, norm/rotary/activation 16%, SDPA 13%, glue 12%):
- attention reads the paged cache in place: scores and the weighted sum are reductions whose
  loads go through the block table, so no [batch, context] copy of K/V is ever made;
- residual add + RMSNorm, rotary and SiLU-and-mul become one loop each around the matmuls
  (which stay oneDNN/MKL calls, as in eager);
- the KV store is an opaque custom op that mutates the cache (vLLM's way): inductor neither
  clones the cache nor reorders the store after the reads.
Every layer calls the same compiled function with its own weights and cache as inputs, so
one compilation serves all layers. Shapes are dynamic (batch rows, block-table width):
warm-up compiles the batch-1 specialisation and the general graph, and each later step
reuses them. Steps whose queries are all short (decode, speculative verification rows,
as in `attention._as_decode`) take this path; prefill and LoRA steps stay eager.
Compiled kernels are cached under `cache_dir` (TORCHINDUCTOR_CACHE_DIR), so a restart
loads them instead of compiling again.
"""
from __future__ import annotations

import functools
import logging
import os
import time

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


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale: float):
    """One query row per sequence over its paged context, read in place (under compile:
    the gathers below are loads inside the reductions, never materialised).

    q [B, Hq, D]; caches [blocks, block_size, Hk, D]; block_tables [B, W]; seq_lens [B].
    """
    batch, q_heads, dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    group = q_heads // kv_heads
    span = block_tables.shape[1] * block_size
    pos = torch.arange(span, device=q.device)
    slots = block_tables.long()[:, pos // block_size] * block_size + pos % block_size
    k = k_cache.view(-1, kv_heads, dim)[slots].float()  # [B, S, Hk, D]
    v = v_cache.view(-1, kv_heads, dim)[slots].float()
    qg = q.float().view(batch, 1, kv_heads, group, dim)
    scores = (qg * k.unsqueeze(3)).sum(-1) * scale  # [B, S, Hk, G]
    valid = pos[None, :] < seq_lens[:, None]
    scores = scores.masked_fill(~valid[:, :, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=1)
    out = (probs.unsqueeze(-1) * v.unsqueeze(3)).sum(1)  # [B, Hk, G, D]
    return out.reshape(batch, q_heads, dim).to(q.dtype)


def decode_layer(hidden, residual, cos, sin, k_cache, v_cache, slot_mapping, block_tables,
                 seq_lens, w: dict, eps: float, heads: int, kv_heads: int, head_dim: int,
                 scale: float):
    """One Llama decoder layer for decode rows; returns (hidden, residual)."""
    hidden, residual = rms_norm(hidden, w["input_norm"], eps, residual)
    tokens = hidden.shape[0]
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    q, k, v = linear(hidden, w["qkv_proj"]).split([q_size, kv_size, kv_size], dim=-1)
    q = rotary(q.reshape(tokens, heads, head_dim), cos, sin)
    k = rotary(k.reshape(tokens, kv_heads, head_dim), cos, sin)
    store_kv_op(k, v.reshape(tokens, kv_heads, head_dim), k_cache, v_cache, slot_mapping)
    attn = paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale)
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
    """One compiled wrapper per process: every runner (and layer) shares its graphs."""
    return torch.compile(decode_layer, fullgraph=True)


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

    @staticmethod
    def accepts(meta: AttentionMetadata, lora) -> bool:
        return lora is None and meta.max_query_len <= SHORT_QUERY

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        """Final-normed hidden states [tokens, hidden], as the model's own forward."""
        if not meta.is_pure_decode:
            meta = _as_decode(meta)  # each draft row attends to its own causal prefix
        rows = input_ids.shape[0]
        # Fresh copies made here (under inference mode, as every caller runs) so the guards
        # see the same kind of tensor whether or not the caller built it in inference mode.
        slots, tables, lens = (t.clone() for t in (meta.slot_mapping, meta.block_tables,
                                                   meta.seq_lens))
        if rows == 1:
            # One graph serves every batch: a size-1 dimension would get its own
            # specialisation (and compile). The twin row writes the same K/V to the same slot.
            input_ids, positions, slots, tables, lens = (
                torch.cat([t, t]) for t in (input_ids, positions, slots, tables, lens))
        if tables.shape[1] == 1:  # likewise the width; the extra column is masked out
            tables = torch.cat([tables, tables], dim=1)
        if self.mark_dynamic:
            for t in (input_ids, positions, slots, tables, lens):
                torch._dynamo.mark_dynamic(t, 0)
            torch._dynamo.mark_dynamic(tables, 1)
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
                                          slots, tables, lens, w, **self.consts)
        return rms_norm(hidden, model.norm, model.cfg.rms_eps, residual)[0][:rows]

    def warm_up(self) -> float:
        """Compile the one graph (rows and block-table width dynamic) before serving, on a
        scratch slot of block 0 that no request holds yet; a second, wider call checks that
        it is reused. Returns the seconds taken (a cache hit loads in a few)."""
        started = time.monotonic()
        device = self.model.embed_tokens.device
        with torch.inference_mode():
            for rows in (2, 3):
                meta = AttentionMetadata(
                    slot_mapping=torch.zeros(rows, dtype=torch.int64, device=device),
                    query_start_loc=torch.arange(rows + 1, dtype=torch.int32, device=device),
                    seq_lens=torch.ones(rows, dtype=torch.int32, device=device),
                    block_tables=torch.zeros(rows, rows, dtype=torch.int32, device=device),
                    query_lens=[1] * rows, seq_lens_list=[1] * rows, max_query_len=1,
                    max_seq_len=1)
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
