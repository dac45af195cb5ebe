// The C++ of kernels/cpu_decode_attention.py (its docstring says what and why); built by
// kernels/cpu_extension.py. The end registers the op with torch's dispatcher (schema and CPU
// kernel), so a call from Python or a compiled graph reaches the kernel without Python.
#include "avx512_helpers.h"
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#ifdef __AVX512F__
// One KV head's query rows in the form its dot products take: float32 vectors for a float32
// cache; for a bfloat16 cache (with AVX512-BF16) bfloat16 pairs for vdpbf16ps, which
// multiplies 32 elements a call without widening the keys. The query came from a bfloat16
// model, so rounding it back to bfloat16 is exact.
template <typename T, int DIM>
struct QueryRow {
  __m512 v[DIM / 16];
  template <typename Q>
  void load(const Q* q) {
    for (int c = 0; c < DIM / 16; ++c) v[c] = load16(q + 16 * c);
  }
  __m512 dot(const T* k) const {  // 16 partial sums of q . k
    __m512 a = _mm512_mul_ps(v[0], load16(k));
    for (int c = 1; c < DIM / 16; ++c) a = _mm512_fmadd_ps(v[c], load16(k + 16 * c), a);
    return a;
  }
};
#ifdef __AVX512BF16__
template <int DIM>
struct QueryRow<c10::BFloat16, DIM> {
  __m512bh v[DIM / 32];
  void load(const float* q) {
    for (int c = 0; c < DIM / 32; ++c)
      v[c] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 32 * c + 16), _mm512_loadu_ps(q + 32 * c));
  }
  void load(const c10::BFloat16* q) {  // already pairs of bfloat16
    for (int c = 0; c < DIM / 32; ++c) v[c] = (__m512bh)_mm512_loadu_si512((const void*)(q + 32 * c));
  }
  __m512 dot(const c10::BFloat16* k) const {
    __m512 a = _mm512_setzero_ps();
    for (int c = 0; c < DIM / 32; ++c)
      a = _mm512_dpbf16_ps(a, v[c], (__m512bh)_mm512_loadu_si512((const void*)(k + 32 * c)));
    return a;
  }
};
#endif

// r[j] = q . k[j] for the 16 keys of a block (k rows `slot` apart): the dot products' lanes
// summed by a transposing add tree (15 adds, 30 shuffles) instead of one horizontal reduction
// (and its latency) per key. Pairs are folded as they come, so few vectors are live at once.
template <typename Q, typename T>
static inline __m512 scores16(const Q& q, const T* k, int64_t slot) {
  __m512 b[8], c[4];
  for (int i = 0; i < 8; ++i) {  // 128-bit lane: [k2i, k2i+1, k2i, k2i+1] partials
    const __m512 x = q.dot(k + (2 * i) * slot), y = q.dot(k + (2 * i + 1) * slot);
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit lane: one partial of each of k4i .. k4i+3
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 d01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// One head's 16 rows of a block, into L2 (T1), not L1 (T0): a block's K and V rows are 32-64
// lines, more than L1's miss buffers hold, so T0 prefetches of two blocks ahead stalled the
// loads they ran beside. On 2 Zen 4 cores, batch 64 with contexts 16-560 in bfloat16 (K/V of
// 30 layers, so read from memory): 1.37 -> 0.97 ms a layer, 10.3 -> 14.6 GB/s; 1 to 6 blocks
// ahead with T1 or T2 measured the same.
template <typename T, int DIM>
static inline void prefetch_rows(const T* p, int64_t slot) {
  for (int64_t j = 0; j < 16; ++j)
    for (int64_t b = 0; b < int64_t(DIM * sizeof(T)); b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + j * slot) + b, _MM_HINT_T1);
}

// One KV head of one sequence (16-slot blocks, heads of DIM, GROUP query heads sharing it)
// in three passes: the scores of every block (each K row read once, the rows AHEAD blocks on
// prefetched), the softmax over them, then the values weighted (each V row read once, likewise
// prefetched). Blocks lie anywhere in the cache, so the hardware prefetcher cannot follow a
// block table. A single pass with an online softmax was slower here: each block's scores ->
// max -> exp -> weighted values chain, plus the rescaling of the sums, left the next block's
// loads waiting behind it; with no such chain between blocks, their loads overlap. On 2 AMX
// cores, batch 64 with contexts 100-600 in bfloat16 and K/V for 30 layers (read from memory,
// as in a step): 1.66 -> 1.32 ms a layer with blocks scattered, 1.42 -> 1.16 ms with each
// sequence's blocks in order; float32 level (2.13-2.19 against 2.17-2.20 ms). The scores
// wait in a per-thread buffer (GROUP x context floats).
constexpr int64_t AHEAD = 3;  // blocks prefetched ahead (2-4 measured within 3%)

// 16 float32 lanes out as the query's type (bfloat16: round to nearest even, as `.to()` does).
static inline void store16(float* p, __m512 x) { _mm512_storeu_ps(p, x); }
#ifdef __AVX512BF16__
static inline void store16(c10::BFloat16* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
}
#endif

template <typename T, int DIM, int GROUP, typename Q>
static void attend_head16(const Q* qh, const T* kc, const T* vc, const int* table,
                          int64_t len, int64_t kv_heads, int64_t h, float scale, Q* out) {
  constexpr int64_t BS = 16, VD = DIM / 16;
  const int64_t slot = kv_heads * DIM, blocks = (len + BS - 1) / BS, padded = blocks * BS;
  const auto rows = [&](const T* cache, int64_t blk) {  // this head's first row of a block
    return cache + int64_t(table[blk]) * BS * slot + h * DIM;
  };
  thread_local std::vector<float> buffer;
  if (int64_t(buffer.size()) < GROUP * padded) buffer.resize(GROUP * padded);
  float* const weights = buffer.data();  // [GROUP][padded]: scores, then softmax weights
  QueryRow<T, DIM> q[GROUP];
  __m512 peak[GROUP];
  for (int g = 0; g < GROUP; ++g) {
    q[g].load(qh + g * DIM);
    peak[g] = _mm512_set1_ps(-1e30f);  // not -inf: -ffast-math assumes there are none
  }
  for (int64_t blk = 0; blk < std::min(AHEAD, blocks); ++blk)
    prefetch_rows<T, DIM>(rows(kc, blk), slot);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    if (blk + AHEAD < blocks) prefetch_rows<T, DIM>(rows(kc, blk + AHEAD), slot);
    const T* k = rows(kc, blk);
    // Slots past len belong to the block (allocated, maybe stale): read, then masked out.
    const __mmask16 valid = first_lanes(len - blk * BS);
    for (int g = 0; g < GROUP; ++g) {
      const __m512 s = _mm512_mask_mul_ps(_mm512_set1_ps(-1e30f), valid, scores16(q[g], k, slot),
                                          _mm512_set1_ps(scale));
      _mm512_storeu_ps(weights + g * padded + blk * BS, s);
      peak[g] = _mm512_max_ps(peak[g], s);
    }
  }
  float inv[GROUP];
  for (int g = 0; g < GROUP; ++g) {
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(peak[g]));
    float* w = weights + g * padded;
    __m512 total = _mm512_setzero_ps();
    for (int64_t i = 0; i < padded; i += 16) {
      const __m512 e = _mm512_maskz_mov_ps(first_lanes(len - i),
                                           exp16(_mm512_sub_ps(_mm512_loadu_ps(w + i), top)));
      _mm512_storeu_ps(w + i, e);
      total = _mm512_add_ps(total, e);
    }
    inv[g] = 1.f / _mm512_reduce_add_ps(total);
  }
  __m512 acc[GROUP][VD];
  for (int g = 0; g < GROUP; ++g)
    for (int64_t c = 0; c < VD; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < std::min(AHEAD, blocks); ++blk)
    prefetch_rows<T, DIM>(rows(vc, blk), slot);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    if (blk + AHEAD < blocks) prefetch_rows<T, DIM>(rows(vc, blk + AHEAD), slot);
    const T* v = rows(vc, blk);
    const int64_t n = std::min(BS, len - blk * BS);
    for (int64_t j = 0; j < n; ++j) {
      __m512 vv[VD];
      for (int64_t c = 0; c < VD; ++c) vv[c] = load16(v + j * slot + 16 * c);
      for (int g = 0; g < GROUP; ++g) {
        const __m512 w = _mm512_set1_ps(weights[g * padded + blk * BS + j]);
        for (int64_t c = 0; c < VD; ++c) acc[g][c] = _mm512_fmadd_ps(w, vv[c], acc[g][c]);
      }
    }
  }
  for (int g = 0; g < GROUP; ++g)
    for (int64_t c = 0; c < VD; ++c)
      store16(out + g * DIM + 16 * c, _mm512_mul_ps(acc[g][c], _mm512_set1_ps(inv[g])));
}

template <typename T, typename Q>
using Head16Fn = void (*)(const Q*, const T*, const T*, const int*, int64_t, int64_t, int64_t,
                          float, Q*);

// The vector path for these shapes, or nullptr (other block sizes, head sizes or groups;
// float16 caches).
template <typename T, int DIM, typename Q>
static Head16Fn<T, Q> head16_for(int64_t bs, int64_t group) {
  if (DIM == 0 || bs != 16 || std::is_same<T, c10::Half>::value) return nullptr;
  constexpr int D = DIM > 0 ? DIM : 32;
  switch (group) {
    case 1: return &attend_head16<T, D, 1, Q>;
    case 2: return &attend_head16<T, D, 2, Q>;
    case 3: return &attend_head16<T, D, 3, Q>;
    case 4: return &attend_head16<T, D, 4, Q>;
    default: return nullptr;
  }
}

// One task per sequence, its KV heads in turn (tasks per (sequence, KV head) pair measured the
// same); handed out one at a time, as contexts differ in length. Q: the query's and the
// output's type (float32, or a bfloat16 model's own rows, read and written without a copy).
template <typename T, int DIM, typename Q>
static bool attend_vector(const Q* q, const T* kc, const T* vc, const int* tables,
                          const int* lens, Q* out, int64_t batch, int64_t width, int64_t bs,
                          int64_t kv_heads, int64_t group, float scale) {
  const auto fn = head16_for<T, DIM, Q>(bs, group);
  if (fn == nullptr) return false;
  const int64_t heads = kv_heads * group, dim = DIM;
#pragma omp parallel for schedule(dynamic, 1) num_threads(at::get_num_threads())
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t offset = (b * heads + h * group) * dim;
      fn(q + offset, kc, vc, tables + b * width, lens[b], kv_heads, h, scale, out + offset);
    }
  return true;
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
  if (attend_vector<T, DIM>(q, kc, vc, tables, lens, out, batch, width, bs, kv_heads, group,
                            scale))
    return;
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

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// A bfloat16 query over a bfloat16 cache straight into the vector path and its output straight
// out (no float32 copies of either: two ATen conversions a layer, ~1 ms of a 64-row step);
// false where that path does not serve these shapes.
static bool attend_bf16(const torch::Tensor& q, const torch::Tensor& k_cache,
                        const torch::Tensor& v_cache, const int* tables, const int* lens,
                        torch::Tensor& out, int64_t width, float scale) {
  using B16 = c10::BFloat16;
  const int64_t kv_heads = k_cache.size(2), dim = q.size(2);
  auto run = dim == 64 ? attend_vector<B16, 64, B16> : dim == 128 ? attend_vector<B16, 128, B16>
                                                                   : nullptr;
  return run != nullptr && run(q.data_ptr<B16>(), k_cache.data_ptr<B16>(),
                               v_cache.data_ptr<B16>(), tables, lens, out.data_ptr<B16>(),
                               q.size(0), width, k_cache.size(1), kv_heads,
                               q.size(1) / kv_heads, scale);
}
#endif

torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                               torch::Tensor block_tables, torch::Tensor seq_lens,
                               double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4, "q [B, Hq, D], caches [N, bs, Hk, D]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t bs = k_cache.size(1), kv_heads = k_cache.size(2);
  TORCH_CHECK(heads % kv_heads == 0 && k_cache.size(3) == dim, "head shapes disagree");
  auto tables = block_tables.to(torch::kInt).contiguous();
  auto lens = seq_lens.to(torch::kInt).contiguous();
  const int* len = lens.data_ptr<int>();
  TORCH_CHECK(std::all_of(len, len + lens.numel(), [](int n) { return n >= 1; }),
              "every row needs one context token or more");
  const float sc = static_cast<float>(scale);
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  if (q.scalar_type() == at::kBFloat16 && k_cache.scalar_type() == at::kBFloat16) {
    auto qc = q.contiguous();
    auto out = torch::empty_like(qc);
    if (attend_bf16(qc, k_cache, v_cache, tables.data_ptr<int>(), len, out, tables.size(1), sc))
      return out;
  }
#endif
  auto qf = q.to(torch::kFloat).contiguous();
  auto out = torch::empty({batch, heads, dim}, qf.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "attend", [&] {
    auto run = dim == 64 ? attend<scalar_t, 64> : dim == 128 ? attend<scalar_t, 128>
                                                               : attend<scalar_t, 0>;
    run(qf.data_ptr<float>(), k_cache.data_ptr<scalar_t>(), v_cache.data_ptr<scalar_t>(),
        tables.data_ptr<int>(), len, out.data_ptr<float>(), batch, tables.size(1), bs,
        kv_heads, heads / kv_heads, dim, sc);
  });
  return out.to(q.scalar_type());
}

TORCH_LIBRARY_FRAGMENT(inferplane, m) {
  m.def("cpu_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor seq_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(inferplane, CPU, m) { m.impl("cpu_decode_attention", &decode_attention); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}  // loading the module registers the op
