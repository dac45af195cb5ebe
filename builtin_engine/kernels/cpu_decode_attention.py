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
(`attend_block16`), each K and V row is widened to float32 once for its group, scores are
vector dot products, the softmax runs 16 scores at a time (the helpers' vector exp), and a KV
head's output rows stay in registers while its V rows stream past. Other shapes and CPUs run
the plain loops below. Measured on 2 AVX512-BF16 cores, batch 64 with contexts 16-560 in
bfloat16 (`bench/decode_profile.py`, before/after/after/before): 19.4-19.7 -> 17.9-18.3 ms of
attention a step, the step 63.9-64.3 -> 61.2-61.6 ms. The kernel is near the memory's pace:
it reads ~425 MB of K/V a step, ~23 GB/s.

Built and cached by `cpu_extension.load_extension`; where no compiler works,
`cpu_decode_attention_available()` is False and the traced attention is used.
"""
from __future__ import annotations

import torch

from .cpu_extension import AVX512_HELPERS, load_extension

_SOURCE = AVX512_HELPERS + r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <vector>

#ifdef __AVX512F__
// 16-slot blocks, heads of 64 or 128 (DIM), GROUP query heads a KV head: each K and V row is
// loaded (and widened) once for the group, scores are dot products of vectors, the softmax
// runs on 16 scores at a time, and each KV head's output rows stay in registers while its V
// rows stream past.
template <typename T, int DIM, int GROUP>
static void attend_block16(const float* qb, const T* kc, const T* vc, const int* table,
                           int64_t len, int64_t kv_heads, float scale, float* scores,
                           float* out) {
  constexpr int64_t BS = 16, VD = DIM / 16;
  const int64_t slot = kv_heads * DIM, heads = kv_heads * GROUP;
  for (int64_t start = 0; start < len; start += BS) {
    const int64_t n = std::min(BS, len - start);
    const T* k = kc + int64_t(table[start / BS]) * BS * slot;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < kv_heads; ++h) {
        __m512 kv[VD];
        for (int64_t c = 0; c < VD; ++c) kv[c] = load16(k + j * slot + h * DIM + 16 * c);
        for (int64_t g = 0; g < GROUP; ++g) {
          const float* q = qb + (h * GROUP + g) * DIM;
          __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q), kv[0]);
          for (int64_t c = 1; c < VD; ++c)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), kv[c], acc);
          scores[(h * GROUP + g) * len + start + j] = _mm512_reduce_add_ps(acc) * scale;
        }
      }
  }
  for (int64_t hq = 0; hq < heads; ++hq) {
    float* s = scores + hq * len;
    __m512 peak = _mm512_set1_ps(-1e30f);
    for (int64_t t = 0; t < len; t += 16) {
      const __mmask16 m = first_lanes(len - t);
      peak = _mm512_mask_max_ps(peak, m, peak, _mm512_maskz_loadu_ps(m, s + t));
    }
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(peak));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t t = 0; t < len; t += 16) {
      const __mmask16 m = first_lanes(len - t);
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + t), top);
      const __m512 p = _mm512_maskz_mov_ps(m, exp16(x));
      _mm512_mask_storeu_ps(s + t, m, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sum));
    for (int64_t t = 0; t < len; t += 16) {
      const __mmask16 m = first_lanes(len - t);
      _mm512_mask_storeu_ps(s + t, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + t), inv));
    }
  }
  for (int64_t h = 0; h < kv_heads; ++h) {
    __m512 acc[GROUP][VD];
    for (int64_t g = 0; g < GROUP; ++g)
      for (int64_t c = 0; c < VD; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t start = 0; start < len; start += BS) {
      const int64_t n = std::min(BS, len - start);
      const T* v = vc + int64_t(table[start / BS]) * BS * slot + h * DIM;
      for (int64_t j = 0; j < n; ++j) {
        __m512 vv[VD];
        for (int64_t c = 0; c < VD; ++c) vv[c] = load16(v + j * slot + 16 * c);
        for (int64_t g = 0; g < GROUP; ++g) {
          const __m512 p = _mm512_set1_ps(scores[(h * GROUP + g) * len + start + j]);
          for (int64_t c = 0; c < VD; ++c) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
        }
      }
    }
    for (int64_t g = 0; g < GROUP; ++g)
      for (int64_t c = 0; c < VD; ++c)
        _mm512_storeu_ps(out + (h * GROUP + g) * DIM + 16 * c, acc[g][c]);
  }
}

template <typename T>
using Block16Fn = void (*)(const float*, const T*, const T*, const int*, int64_t, int64_t, float,
                           float*, float*);

// The vector path for these shapes, or nullptr (other block sizes, head sizes or groups).
template <typename T, int DIM>
static Block16Fn<T> block16_for(int64_t bs, int64_t group) {
  if (DIM == 0 || bs != 16) return nullptr;
  constexpr int D = DIM > 0 ? DIM : 16;
  switch (group) {
    case 1: return &attend_block16<T, D, 1>;
    case 2: return &attend_block16<T, D, 2>;
    case 3: return &attend_block16<T, D, 3>;
    case 4: return &attend_block16<T, D, 4>;
    default: return nullptr;
  }
}
#endif

// DIM > 0: the head size known at compile time (the inner loops unroll into FMAs); 0: `dim`.
// One task per sequence, all its KV heads: a slot's K (or V) row of every head is one
// contiguous run of the block, read once. Tasks are handed out one at a time (dynamic
// schedule): contexts differ in length, and static halves of the batch can differ 3x.
template <typename T, int DIM>
static void attend(const float* q, const T* kc, const T* vc, const int* tables,
                   const int* lens, float* out, int64_t batch, int64_t width, int64_t bs,
                   int64_t kv_heads, int64_t group, int64_t dim_arg, float scale) {
  const int64_t dim = DIM > 0 ? DIM : dim_arg;
  const int64_t heads = kv_heads * group;
  const int64_t row = kv_heads * dim;  // one slot of a block
#ifdef __AVX512F__
  const auto fast = block16_for<T, DIM>(bs, group);
#endif
#pragma omp parallel num_threads(at::get_num_threads())
  {
    std::vector<float> scores, acc(heads * dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens[b];
      const int* table = tables + b * width;
      const float* qb = q + b * heads * dim;
      scores.resize(heads * len);
#ifdef __AVX512F__
      if (fast != nullptr) {
        fast(qb, kc, vc, table, len, kv_heads, scale, scores.data(), out + b * heads * dim);
        continue;
      }
#endif
      for (int64_t start = 0; start < len; start += bs) {  // block by block: no division
        const int64_t n = std::min(bs, len - start);
        const T* k = kc + int64_t(table[start / bs]) * bs * row;
        for (int64_t j = 0; j < n; ++j, k += row) {
          for (int64_t hq = 0; hq < heads; ++hq) {
            const float* qh = qb + hq * dim;
            const T* kh = k + (hq / group) * dim;
            float dot = 0.f;
            for (int64_t d = 0; d < dim; ++d) dot += qh[d] * static_cast<float>(kh[d]);
            scores[hq * len + start + j] = dot * scale;
          }
        }
      }
      for (int64_t hq = 0; hq < heads; ++hq) {
        float* s = scores.data() + hq * len;
        float peak = s[0];
        for (int64_t t = 1; t < len; ++t) peak = s[t] > peak ? s[t] : peak;
        float total = 0.f;
        for (int64_t t = 0; t < len; ++t) { s[t] = std::exp(s[t] - peak); total += s[t]; }
        const float inv = 1.f / total;
        for (int64_t t = 0; t < len; ++t) s[t] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t start = 0; start < len; start += bs) {
        const int64_t n = std::min(bs, len - start);
        const T* v = vc + int64_t(table[start / bs]) * bs * row;
        for (int64_t j = 0; j < n; ++j, v += row) {
          for (int64_t hq = 0; hq < heads; ++hq) {
            const float p = scores[hq * len + start + j];
            const T* vh = v + (hq / group) * dim;
            float* a = acc.data() + hq * dim;
            for (int64_t d = 0; d < dim; ++d) a[d] += p * static_cast<float>(vh[d]);
          }
        }
      }
      std::copy(acc.begin(), acc.end(), out + b * heads * dim);
    }
  }
}

torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                               torch::Tensor block_tables, torch::Tensor seq_lens,
                               double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4, "q [B, Hq, D], caches [N, bs, Hk, D]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t bs = k_cache.size(1), kv_heads = k_cache.size(2);
  TORCH_CHECK(heads % kv_heads == 0 && k_cache.size(3) == dim, "head shapes disagree");
  auto qf = q.to(torch::kFloat).contiguous();
  auto tables = block_tables.to(torch::kInt).contiguous();
  auto lens = seq_lens.to(torch::kInt).contiguous();
  TORCH_CHECK(lens.min().item<int>() >= 1, "every row needs one context token or more");
  auto out = torch::empty({batch, heads, dim}, qf.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "attend", [&] {
    auto run = dim == 64 ? attend<scalar_t, 64> : dim == 128 ? attend<scalar_t, 128>
                                                               : attend<scalar_t, 0>;
    run(qf.data_ptr<float>(), k_cache.data_ptr<scalar_t>(), v_cache.data_ptr<scalar_t>(),
        tables.data_ptr<int>(), lens.data_ptr<int>(), out.data_ptr<float>(), batch,
        tables.size(1), bs, kv_heads, heads / kv_heads, dim, static_cast<float>(scale));
  });
  return out.to(q.scalar_type());
}
"""


def _extension():
    return load_extension("inferplane_cpu_decode_attention", _SOURCE, ("decode_attention",))


def cpu_decode_attention_available() -> bool:
    return _extension() is not None


@torch.library.custom_op("inferplane::cpu_decode_attention", mutates_args=())
def cpu_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         block_tables: torch.Tensor, seq_lens: torch.Tensor,
                         scale: float) -> torch.Tensor:
    """q [B, Hq, D] -> [B, Hq, D]: row i attends to the first seq_lens[i] slots of its
    block_tables[i] (every row one context token or more)."""
    return _extension().decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale)


@cpu_decode_attention.register_fake
def _(q, k_cache, v_cache, block_tables, seq_lens, scale):
    return torch.empty_like(q)
