"""Paged decode attention for CPU as a small C++ kernel, built once per machine and cached.

    if cpu_decode_attention_available():            # builds (or loads) the extension once
        out = torch.ops.inferplane.cpu_decode_attention(q, k_cache, v_cache,
                                                        block_tables, seq_lens, scale)

One query row per sequence (q [B, Hq, D]) over its paged context (caches [blocks,
block_size, Hk, D], float32 or bfloat16), the way vLLM's CPU backend does it: one task per
sequence on an OpenMP team of torch's thread count, which scores every query head against
its cached keys, softmaxes in float32 and sums the values in a second pass over the same
blocks. Each K and V row is read once per step, straight from its block. Inductor's fusion of
the same maths (`paged_attention_ops.paged_decode_attention`) splits it into eight parallel
loops with a horizontal reduction per score and an index check per load: measured on 2 AVX2
cores in one process, batch 64 with contexts 16-560 in float32, 5.2-5.3 ms a layer against
2.1-2.8 ms here (a decode step 308 -> 275 ms).

With AVX-512, 16-slot blocks, heads of 64 or 128 and 1-4 query heads a KV head
(`attend_head16`), each (sequence, KV head) takes three passes: a block's 16 scores are 16 dot
products folded by one transposing add tree (bfloat16 caches multiply with AVX512-BF16's
vdpbf16ps, no widening of the keys), the softmax runs over all of them at once, and the V rows
are summed with their weights; the rows of the blocks AHEAD on are prefetched into L2 in both
passes, since blocks lie anywhere in the cache and the hardware prefetcher cannot follow a
block table. On 2 AMX cores, batch 64 with contexts 100-600 in bfloat16 and K/V for 30 layers
(so read from memory, as in a step): 1.66 -> 1.32 ms a layer against the single pass with an
online softmax before it (which had replaced a two-pass kernel that read every block twice).
A bfloat16 query over a bfloat16 cache is read and answered in place on that path (no
float32 copies of q and of the output: 58 -> 26 us of fixed cost a call, ~1 ms of a step),
with the same bits as the float32 route rounded back.
Other shapes, float16 caches and CPUs without AVX-512 run the plain loops below.

Built and cached by `cpu_extension.load_extension`; where no compiler works,
`cpu_decode_attention_available()` is False and the traced attention is used.
"""
from __future__ import annotations

import torch

from builtin_engine.kernels.cpu_extension import kernel_sources, load_ops

_SOURCES = kernel_sources("cpu_decode_attention.cpp")  # in kernels/csrc/
OP = "inferplane::cpu_decode_attention"
# cpu_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables,
#                      Tensor seq_lens, float scale) -> Tensor   (the C++ registers it)
# q [B, Hq, D] -> [B, Hq, D]: row i attends to the first seq_lens[i] slots of its
# block_tables[i] (every row one context token or more).


def _fake(q, k_cache, v_cache, block_tables, seq_lens, scale):
    return torch.empty_like(q)


def _extension():
    return load_ops("inferplane_cpu_decode_attention", _SOURCES, {OP: _fake})


def cpu_decode_attention_available() -> bool:
    """The kernel built (or loaded) here, and so the op defined."""
    return _extension() is not None
