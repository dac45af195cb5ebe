"""Causal prompt attention over the paged cache in bfloat16 products: AMX tiles where the CPU
has them, AVX512-BF16 dot products elsewhere.

    if bf16_prefill_serves(k_cache, head_dim):      # bfloat16 cache, AVX512-BF16 CPU
        out = bf16_prefill_attention(q, k_cache, v_cache, tables, query_starts, seq_lens, scale)
    bf16_prefill_engine()                           # "AMX tiles" | "AVX512-BF16 dot products"

The same contract as kernels/cpu_prefill_attention.py (run i owns the query rows
q[query_starts[i]:query_starts[i + 1]], the last of its seq_lens[i] context tokens), but the two
products of attention take bfloat16 in and sum in float32, and only the softmax runs on
float32 vector lanes:

1. each (run, KV head) has its context packed once, in chunks of 64 keys, into the layouts
   both product engines read (VNNI: pairs of bfloat16 side by side in one 32-bit word): K^T
   as [D/2, 64] pairs of dimensions, V as [32, D] pairs of keys; the chunk past the context
   is zeros;
2. each (run, KV head, tile of 32 query tokens) multiplies its 32 x group query rows by a
   chunk's K^T (scores in float32), takes an online softmax over the visible keys (scaled
   here, in float32, so the queries are used as stored), and adds P (rounded to bfloat16, as
   SDPA's CPU flash kernel does) times the chunk's V to its float32 accumulator.

The products run as tile matrix multiplies through ATen's `cpublas::brgemm` (oneDNN's AMX
micro-kernel) on AMX CPUs; elsewhere (AVX512-BF16 without AMX: Zen 4, Zen 5, Cooper Lake) as
register-blocked `vdpbf16ps` micro-kernels over the same layouts: a 32-bit broadcast of a
query (or P) pair times one packed vector of 16 keys (or 16 dimensions), four rows sharing
each load, 32 multiply-adds an instruction against the 16 of the float32 kernel, and no
per-tile transposes (the context is packed once per run and head, not once per tile).

Why: the float32 AVX-512 kernel transposes every block it reads and multiplies with float32
FMAs: on 2 Zen 5 cores a 768-token prompt took 100 ms of a 320 ms step (~200 GF/s against
~1 TF/s of the projections' bfloat16 GEMMs); on AMX prompt attention was ~45% of a
2,048-token step of five 400-token prompts before the tiles.
"""
from __future__ import annotations

import functools
import os

import torch

from builtin_engine.kernels.cpu_extension import kernel_sources, load_ops

_SOURCES = kernel_sources("cpu_prefill_attention_bf16.cpp")  # in kernels/csrc/
OP = "inferplane::cpu_prefill_attention_bf16"  # the C++ registers it: the schema of
# inferplane::cpu_prefill_attention, which hands bfloat16 inputs here where this serves


DISABLE_ENV = "INFERPLANE_BF16_ATTENTION"  # "0" keeps the float32 AVX-512 prompt kernel
VECTOR_HEAD_DIMS = (32, 64, 128)  # head sizes of the vdpbf16ps path (tiles: any multiple of 32)


def _fake(q, k_cache, v_cache, block_tables, query_starts, seq_lens, scale):
    return torch.empty_like(q)


def _extension():
    return load_ops("inferplane_cpu_prefill_attention_bf16", _SOURCES, {OP: _fake})


@functools.cache
def bf16_prefill_engine() -> str | None:
    """What runs the products on this CPU: "AMX tiles", "AVX512-BF16 dot products", or None
    (no AVX512-BF16, the kernel does not build, or INFERPLANE_BF16_ATTENTION=0)."""
    from builtin_engine.core.device_defaults import cpu_flags
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return None
    if "avx512_bf16" not in cpu_flags() and "amx_bf16" not in cpu_flags():
        return None
    module = _extension()
    if module is None:
        return None
    return "AMX tiles" if module.amx_ready() else "AVX512-BF16 dot products"


def bf16_prefill_serves(k_cache: torch.Tensor, head_dim: int) -> bool:
    """Whether prompt attention over this cache runs here (the op and the start-up line both
    ask this)."""
    if k_cache.device.type != "cpu" or k_cache.dtype != torch.bfloat16 or head_dim % 32:
        return False
    engine = bf16_prefill_engine()
    return engine == "AMX tiles" or (engine is not None and head_dim in VECTOR_HEAD_DIMS)


def bf16_prefill_attention(q, k_cache, v_cache, block_tables, query_starts, seq_lens,
                           scale: float) -> torch.Tensor:
    """q [T, Hq, D] bfloat16 -> [T, Hq, D]: causal attention of each run over its context
    (the op; `bf16_prefill_engine()` not None first)."""
    return torch.ops.inferplane.cpu_prefill_attention_bf16(q, k_cache, v_cache, block_tables,
                                                           query_starts, seq_lens, scale)
