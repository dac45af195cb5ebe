"""Decode and mixed steps through torch.compile'd (inductor) decoder layers, on any device.

    compiled = CompiledDecode(model, kv_caches, cache_dir)   # compiles nothing yet
    compiled.warm_up()                                      # bounded: two graphs, two shapes each
    if compiled.accepts(meta, lora):
        hidden = compiled.forward(input_ids, positions, meta)

What it fuses (the eager CPU profile of a batch-64 decode step: KV gather 36%, matmuls
20%, norm/rotary/activation 16%, SDPA 13%, glue 12%):
- attention reads the paged cache in place, block by block (paged_attention_ops.BlockPlan),
  so no [batch, context] copy of K/V is made and a short context in a batch of long ones
  costs its own blocks only;
- residual add + RMSNorm, rotary and SiLU-and-mul become one loop each around the matmuls
  (oneDNN calls on weights packed at load, kernels/packed_linear.py);
- the KV store is an opaque custom op that mutates the cache (vLLM's way): inductor neither
  clones the cache nor reorders the store after the reads.
Every layer calls the same compiled function with its own weights and cache as inputs, so
one compilation serves all layers. Two graphs: decode steps (every query short: decode rows,
speculative verification rows as in `attention._as_decode`) and mixed steps (decode rows
beside prompt chunks: continuous batching's usual step on a busy engine). A mixed step runs
its decode rows first, through the same traced attention, and its long query runs through
an opaque causal-attention op; every projection and fused loop is shared by all its
tokens. Before this graph a mixed step ran eagerly, one SDPA call per decode row per
layer: 64 decode rows beside a 256-token chunk took 3.4-4.8 s against 0.8-0.9 s here
(`bench/decode_profile.py --prefill-chunk 256`, 2 AVX2 cores). A step of prompts alone
lends its last token to be the decode row (`attention.split_last_token`). Shapes are
dynamic (rows, tokens, blocks read, table widths): warm-up compiles each graph and checks it
is reused. LoRA steps stay eager. Compiled kernels are cached under
`cache_dir` (TORCHINDUCTOR_CACHE_DIR), so a restart loads them instead of compiling again.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from itertools import accumulate

import torch

from builtin_engine.kernels.activation import silu_and_mul_torch
from builtin_engine.kernels.attention import (SHORT_QUERY, AttentionMetadata, _as_decode,
                                              select_sequences, split_last_token)
from builtin_engine.kernels.cpu_activation import cpu_silu_and_mul, cpu_silu_and_mul_available
from builtin_engine.kernels.cpu_decode_attention import cpu_decode_attention_available
from builtin_engine.kernels.cpu_prefill_attention import cpu_prefill_attention_serves
from builtin_engine.kernels.cpu_prefill_attention_bf16 import (bf16_prefill_engine,
                                                               bf16_prefill_serves)
from builtin_engine.kernels.layernorm import rms_norm_torch as rms_norm
from builtin_engine.kernels.packed_linear import packed_linear
from builtin_engine.kernels.paged_attention_ops import (BlockPlan, decode_attention, pack_long_runs,
                                                        prefill_attention_op, store_kv_op)
from builtin_engine.kernels.rotary import _rotate as rotary
from builtin_engine.kernels.step_ops import define_step_ops
from builtin_engine.models.quantization import Int8Weight

logger = logging.getLogger(__name__)


def linear(x, weight):
    """weight: a tensor (its oneDNN packed copy is used where there is one), or (int8 values,
    scale) for a weight-only int8 projection."""
    if isinstance(weight, tuple):
        values, scale = weight
        return torch.nn.functional.linear(x, values.to(x.dtype)) * scale
    return packed_linear(x, weight)


def _attention_inputs(hidden, residual, cos, sin, k_cache, v_cache, slot_mapping, w, eps,
                      heads, kv_heads, head_dim):
    """Norm, q/k/v projection and rotary; K/V stored. Returns (q [T, Hq, D], residual)."""
    hidden, residual = rms_norm(hidden, w["input_norm"], eps, residual)
    tokens = hidden.shape[0]
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    q, k, v = linear(hidden, w["qkv_proj"]).split([q_size, kv_size, kv_size], dim=-1)
    q = rotary(q.reshape(tokens, heads, head_dim), cos, sin)
    k = rotary(k.reshape(tokens, kv_heads, head_dim), cos, sin)
    store_kv_op(k, v.reshape(tokens, kv_heads, head_dim), k_cache, v_cache, slot_mapping)
    return q, residual


def _attention_output_and_mlp(attn, residual, w, eps, cpu_silu: bool):
    hidden = linear(attn.reshape(attn.shape[0], -1), w["o_proj"])
    hidden, residual = rms_norm(hidden, w["post_norm"], eps, residual)
    gate_up = linear(hidden, w["gate_up_proj"])
    act = cpu_silu_and_mul(gate_up) if cpu_silu else silu_and_mul_torch(gate_up)
    return linear(act, w["down_proj"]), residual


def decode_layer(hidden, residual, cos, sin, k_cache, v_cache, slot_mapping, plan: BlockPlan,
                 w: dict, eps: float, heads: int, kv_heads: int, head_dim: int,
                 scale: float, cpu_kernel: bool, cpu_silu: bool):
    """One Llama decoder layer for decode rows; returns (hidden, residual)."""
    q, residual = _attention_inputs(hidden, residual, cos, sin, k_cache, v_cache,
                                    slot_mapping, w, eps, heads, kv_heads, head_dim)
    attn = decode_attention(q, k_cache, v_cache, plan, scale, cpu_kernel)
    return _attention_output_and_mlp(attn, residual, w, eps, cpu_silu)


def mixed_layer(hidden, residual, cos, sin, k_cache, v_cache, slot_mapping, plan: BlockPlan,
                long_meta, long_tables, w: dict, eps: float, heads: int, kv_heads: int,
                head_dim: int, scale: float, cpu_kernel: bool, cpu_silu: bool):
    """One layer for a mixed step: the plan's decode rows first, then the long query runs
    that `long_meta`/`long_tables` describe (see `_long_run_inputs`)."""
    q, residual = _attention_inputs(hidden, residual, cos, sin, k_cache, v_cache,
                                    slot_mapping, w, eps, heads, kv_heads, head_dim)
    short = plan.index.shape[0]
    attn = torch.cat([decode_attention(q[:short], k_cache, v_cache, plan, scale, cpu_kernel),
                      prefill_attention_op(q[short:], k_cache, v_cache, long_meta, long_tables,
                                        scale)])
    return _attention_output_and_mlp(attn, residual, w, eps, cpu_silu)


def _layer_weights(layer) -> dict:
    def weight(name):
        value = getattr(layer, name)
        return (value.values, value.scale) if isinstance(value, Int8Weight) else value

    return {n: weight(n) for n in ("input_norm", "qkv_proj", "o_proj", "post_norm",
                                   "gate_up_proj", "down_proj")}


_COMPILE_OPTIONS = {"emulate_precision_casts": True}


@functools.cache
def compiled_layer():
    """One compiled wrapper per process: every runner (and layer) shares its graphs.

    Fused kernels keep a bfloat16/float16 value in float32 from one op to the next unless
    asked to round it where eager does (emulate_precision_casts). Asked, a half-precision
    model computes what its eager path computes, but for the order of attention's sums; not
    asked, every fused op drifts from it (greedy text parted from eager's at the first
    token). In float32 the option changes nothing."""
    return torch.compile(decode_layer, fullgraph=True, options=_COMPILE_OPTIONS)


@functools.cache
def compiled_mixed_layer():
    """The mixed step's layer (decode rows + long query runs), compiled like `compiled_layer`."""
    return torch.compile(mixed_layer, fullgraph=True, options=_COMPILE_OPTIONS)


def default_cache_dir() -> str:
    """Where compiled kernels persist: $INFERPLANE_DATA_DIR/inductor, else ~/.cache."""
    root = os.environ.get("INFERPLANE_DATA_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "inferplane")
    return os.path.join(root, "inductor")


def _cpu_kernel(kv_caches) -> bool:
    """Decode attention by the C++ kernel: on CPU where it builds (once per machine)."""
    return kv_caches[0][0].device.type == "cpu" and cpu_decode_attention_available()


def _cpu_silu(kv_caches) -> bool:
    """SiLU-and-mul by the C++ kernel: a bfloat16 model on a CPU with AVX512-BF16."""
    k_cache = kv_caches[0][0]
    return (k_cache.device.type == "cpu" and k_cache.dtype == torch.bfloat16
            and cpu_silu_and_mul_available())


def _cpu_prompt_kernel(model, kv_caches) -> str | None:
    """Which C++ kernel runs prompt attention (inside `prefill_attention_op`), None for SDPA:
    built here, before warm-up, rather than at the first mixed step."""
    k_cache = kv_caches[0][0]
    if not cpu_prefill_attention_serves(k_cache, model.cfg.head_dim):
        return None
    if bf16_prefill_serves(k_cache, model.cfg.head_dim):
        return f"C++ kernel ({bf16_prefill_engine()})"
    return "C++ kernel"


def _mark_dynamic(*tensors: torch.Tensor) -> None:
    for t in tensors:
        torch._dynamo.mark_dynamic(t, 0)


class CompiledDecode:
    def __init__(self, model, kv_caches, cache_dir: str | None = None):
        self.model = model
        self.kv_caches = kv_caches
        self.cache_dir = cache_dir or default_cache_dir()
        self.step_ops = define_step_ops()  # store_kv, packed_linear: "C++" (or "Python")
        os.makedirs(self.cache_dir, exist_ok=True)
        # Inductor reads it when it compiles. An explicit directory wins; otherwise one the
        # operator exported before start wins over the default.
        if cache_dir:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.cache_dir
        else:
            self.cache_dir = os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", self.cache_dir)
        cfg = model.cfg
        self.consts = dict(eps=cfg.rms_eps, heads=cfg.num_heads, kv_heads=cfg.num_kv_heads,
                           head_dim=cfg.head_dim, scale=model.layers[0].scale,
                           cpu_kernel=_cpu_kernel(kv_caches), cpu_silu=_cpu_silu(kv_caches))
        self.cpu_prompt_kernel = _cpu_prompt_kernel(model, kv_caches)
        self.weights = [_layer_weights(layer) for layer in model.layers]
        self.layer = compiled_layer()
        self.mixed = compiled_mixed_layer()
        self.warm_up_s: float | None = None
        self.steps = {"decode": 0, "mixed": 0}  # steps served by each graph, warm-up included
        # Until warm-up has compiled each dynamic graph (later calls reuse it unmarked).
        self.mark_dynamic = self.mark_dynamic_mixed = True
        self.model_block_size = kv_caches[0][0].shape[1]

    @staticmethod
    def accepts(meta: AttentionMetadata, lora) -> bool:
        """Every step without LoRA: decode steps, mixed steps, and steps of prompts alone,
        whose last run gives up its last token as the mixed graph's decode row (so all
        but a lone prompt of SHORT_QUERY + 1 tokens; it runs eagerly)."""
        return lora is None and (min(meta.query_lens) <= SHORT_QUERY
                                 or max(meta.query_lens) > SHORT_QUERY + 1)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        """Final-normed hidden states [tokens, hidden], as the model's own forward."""
        if meta.max_query_len > SHORT_QUERY:
            self.steps["mixed"] += 1
            return self._forward_mixed(input_ids, positions, meta)
        self.steps["decode"] += 1
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
            _mark_dynamic(input_ids, positions, slots, *plan)
            torch._dynamo.mark_dynamic(plan.index, 1)
            torch._dynamo.mark_dynamic(plan.tables, 1)
        hidden, residual, cos, sin = self._inputs(input_ids, positions, self.mark_dynamic)
        for w, (k_cache, v_cache) in zip(self.weights, self.kv_caches):
            hidden, residual = self.layer(hidden, residual, cos, sin, k_cache, v_cache,
                                          slots, plan, w, **self.consts)
        return self._final_norm(hidden, residual)[:rows]

    def _forward_mixed(self, input_ids: torch.Tensor, positions: torch.Tensor,
                       meta: AttentionMetadata) -> torch.Tensor:
        """Decode rows and long query runs in one step: the tokens are reordered decode rows
        first (the twin trick keeps them at two or more), run through the mixed graph, and
        put back in the caller's order."""
        if min(meta.query_lens) > SHORT_QUERY:  # prompts alone: one gives a decode row
            seq = next(i for i, n in enumerate(meta.query_lens) if n > SHORT_QUERY + 1)
            meta = split_last_token(meta, seq)
        short = [i for i, n in enumerate(meta.query_lens) if n <= SHORT_QUERY]
        long = [i for i, n in enumerate(meta.query_lens) if n > SHORT_QUERY]
        starts = [0, *accumulate(meta.query_lens)]
        short_rows = [r for i in short for r in range(starts[i], starts[i + 1])]
        long_rows = [r for i in long for r in range(starts[i], starts[i + 1])]
        twin = len(short_rows) == 1
        device = input_ids.device
        order = torch.tensor(short_rows[:twin] + short_rows + long_rows, device=device)
        decode = _as_decode(select_sequences(meta, short))
        tables, lens = decode.block_tables, decode.seq_lens
        if twin:
            tables, lens = torch.cat([tables, tables]), torch.cat([lens, lens])
        plan = BlockPlan.build(tables, lens, self.model_block_size)
        long_meta, long_tables = pack_long_runs(meta, long)
        ids, pos, slots = input_ids[order], positions[order], meta.slot_mapping[order]
        mark = self.mark_dynamic_mixed
        if mark:
            _mark_dynamic(ids, pos, slots, *plan, long_meta, long_tables)
            torch._dynamo.mark_dynamic(plan.index, 1)
            torch._dynamo.mark_dynamic(plan.tables, 1)
        hidden, residual, cos, sin = self._inputs(ids, pos, mark)
        for w, (k_cache, v_cache) in zip(self.weights, self.kv_caches):
            hidden, residual = self.mixed(hidden, residual, cos, sin, k_cache, v_cache, slots,
                                          plan, long_meta, long_tables, w, **self.consts)
        hidden = self._final_norm(hidden, residual)
        out = torch.empty_like(hidden[twin:])
        out[order[twin:]] = hidden[twin:]
        return out

    def _inputs(self, input_ids, positions, mark: bool):
        """(embeddings, zero residual, cos, sin) of the step's tokens."""
        model = self.model
        cos, sin = model.cos_sin_cache[positions].float().chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        hidden = torch.nn.functional.embedding(input_ids, model.embed_tokens)
        # x + 0 == x exactly, so a zero residual lets layer 0 share the others' graph.
        residual = torch.zeros_like(hidden)
        if mark:
            _mark_dynamic(hidden, residual, cos, sin)
        return hidden, residual, cos, sin

    def _final_norm(self, hidden, residual):
        return rms_norm(hidden, self.model.norm, self.model.cfg.rms_eps, residual)[0]

    def warm_up(self) -> float:
        """Compile the two graphs (decode; decode rows + a long run), rows and widths
        dynamic, before serving, on a scratch slot of block 0 that no request holds yet; a
        second, wider call of each checks it is reused. Returns the seconds taken (a cache
        hit loads in a few)."""
        started = time.monotonic()
        with torch.inference_mode():
            # Rows, block-table width and block count all differ (2/3/5, then 3/4/9): sizes
            # equal at tracing would be given one symbol, and a guard that they stay equal.
            for rows in (2, 3):
                self.forward(*self._scratch_step([1] * rows))
                self.mark_dynamic = False
            # Decode rows beside a prompt run: token, row and block counts all differ too.
            for rows, prompt in ((2, SHORT_QUERY + 5), (3, 2 * SHORT_QUERY + 7)):
                self.forward(*self._scratch_step([1] * rows + [prompt]))
                self.mark_dynamic_mixed = False
        self.warm_up_s = time.monotonic() - started
        logger.info("compiled decode step in %.1fs (cache %s)", self.warm_up_s, self.cache_dir)
        return self.warm_up_s

    def _scratch_step(self, query_lens: list[int]):
        """(ids, positions, meta) of a step writing only slot 0: sequence i has i + 1 blocks
        of context, its table all block 0."""
        device = self.model.embed_tokens.device
        block = self.model_block_size
        rows = len(query_lens)
        lens = [(i + 1) * block + n for i, n in enumerate(query_lens)]
        tokens = sum(query_lens)
        starts = [0, *accumulate(query_lens)]
        meta = AttentionMetadata(
            slot_mapping=torch.zeros(tokens, dtype=torch.int64, device=device),
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
            block_tables=torch.zeros(rows, rows + 1 + max(query_lens) // block,
                                     dtype=torch.int32, device=device),
            query_lens=query_lens, seq_lens_list=lens, max_query_len=max(query_lens),
            max_seq_len=max(lens))
        positions = torch.cat([torch.arange(s - n, s) for s, n in zip(lens, query_lens)])
        ids = torch.zeros(tokens, dtype=torch.int64, device=device)
        return ids, positions.to(device), meta


def build_compiled_decode(config, model, kv_caches) -> CompiledDecode | None:
    """The compiled decode step the config asks for, warmed up; None for eager decode."""
    wanted, _ = config.resolved_compile()
    if not wanted or not kv_caches:
        return None
    compiled = CompiledDecode(model, kv_caches, config.compile_cache_dir)
    compiled.warm_up()
    return compiled
