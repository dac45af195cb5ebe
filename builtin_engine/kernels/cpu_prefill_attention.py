"""Causal attention of prompt runs over the paged cache for CPU, as a small C++ kernel.

    if cpu_prefill_attention_available():           # builds (or loads) the extension once
        out = torch.ops.inferplane.cpu_prefill_attention(q, k_cache, v_cache, tables,
                                                         query_starts, seq_lens, scale)

Run i owns the query rows q[query_starts[i]:query_starts[i + 1]] (q [T, Hq, D]), the last
rows of a context of seq_lens[i] tokens whose K/V, this step's included, are in the blocks of
tables[i]. One task per (run, KV head, tile of 32 query tokens): the tile's rows of every
query head in the group share each K/V block it reads. Tasks are handed out dynamically,
heaviest (latest tiles) first. Softmax is online (a running max and sum per row) in float32,
and a tile stops at its last row's position.

With AVX-512, 16-slot blocks and heads 64 or 128 wide (`prefill_block16`): a block's
keys are transposed into [D, 16] so that a row's 16 scores are one vector of FMAs (four rows
share each key load), exp is a vector polynomial, and the values are summed a vector of
dimensions at a time. Elsewhere the same loops run as plain C++, which the compiler does not
vectorise as well: 3x slower than SDPA, so `cpu_prefill_attention_serves` routes those shapes
and CPUs to SDPA.

Why not SDPA: CPU SDPA's flash kernel makes 45-70 GF/s on prompts of 64-512 tokens with
64-wide heads; prompt attention was 29% of the engine's time in the 64-request benchmark
(py-spy). Measured on 2 AVX512-BF16 cores, one bfloat16 prompt, 9 query / 3 KV heads: 128
tokens 0.17 ms against SDPA's 0.32, 256 tokens 0.52 against 1.07, 512 tokens 1.90 against
3.92 a layer. A compiled step of 8 prompts of 256 tokens beside 8 decode rows went 958 ->
851 ms, 4 prompts of 512 1424 -> 1103 ms (medians, taking turns in one process).
"""
from __future__ import annotations

import functools

import torch

from builtin_engine.kernels.cpu_extension import kernel_sources, load_ops
from builtin_engine.kernels.cpu_prefill_attention_bf16 import bf16_prefill_engine

_SOURCES = kernel_sources("cpu_prefill_attention.cpp")  # in kernels/csrc/
OP = "inferplane::cpu_prefill_attention"
# cpu_prefill_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables,
#                       Tensor query_starts, Tensor seq_lens, float scale) -> Tensor
# q [T, Hq, D] -> [T, Hq, D]: causal attention of each run's rows over its context (in
# bfloat16 products for bfloat16 caches on AVX512-BF16 and AMX CPUs: the C++ hands those to
# inferplane::cpu_prefill_attention_bf16, kernels/cpu_prefill_attention_bf16.py).
_ROUTES = {None: 0, "AVX512-BF16 dot products": 1, "AMX tiles": 2}  # csrc's Bf16Route


def _fake(q, k_cache, v_cache, block_tables, query_starts, seq_lens, scale):
    return torch.empty_like(q)


@functools.cache
def _extension():
    module = load_ops("inferplane_cpu_prefill_attention", _SOURCES, {OP: _fake})
    if module is not None:
        # The C++ routes by this answer as bf16_prefill_serves does: the vector path for
        # heads of VECTOR_HEAD_DIMS (32, 64, 128: csrc's takes_bf16), AMX any multiple of 32.
        module.route_bf16(_ROUTES[bf16_prefill_engine()])
    return module


def cpu_prefill_attention_available() -> bool:
    return _extension() is not None


FAST_HEAD_DIMS = (64, 128)


def cpu_prefill_attention_serves(k_cache: torch.Tensor, head_dim: int) -> bool:
    """Whether prompt attention over this cache takes the kernel (its AVX-512 path) or SDPA."""
    from builtin_engine.core.device_defaults import cpu_flags
    return (k_cache.device.type == "cpu" and "avx512f" in cpu_flags() and k_cache.shape[1] == 16
            and head_dim in FAST_HEAD_DIMS and cpu_prefill_attention_available())
