// The C++ of kernels/cpu_prefill_attention_bf16.py (its docstring says what and why); built by
// kernels/cpu_extension.py. The end registers the op with torch's dispatcher (schema and CPU
// kernel), so a call from Python or a compiled graph reaches the kernel without Python.
#include "avx512_helpers.h"
#include "prompt_runs.h"
#include <ATen/native/CPUBlas.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace cpublas = at::native::cpublas;
using bf16 = c10::BFloat16;
static constexpr int64_t kChunk = 64;   // keys per tile product
static constexpr int64_t kTile = 32;    // query tokens per task
static constexpr float kMasked = -1e30f;

bool amx_ready() { return cpublas::could_pack(at::kBFloat16); }

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// One (run, KV head): K^T chunks [D/2][kChunk] of dimension pairs, V chunks [kChunk/2][D] of
// key pairs (both as 32-bit words), zeros past `len` keys.
static void pack_context(const bf16* kc, const bf16* vc, const int* table, int64_t len,
                         int64_t bs, int64_t slot, int64_t h, int64_t dim, uint32_t* kp,
                         uint32_t* vp) {
  const int64_t chunks = (len + kChunk - 1) / kChunk, half = dim / 2;
  std::memset(kp, 0, chunks * half * kChunk * 4);
  std::memset(vp, 0, chunks * (kChunk / 2) * dim * 4);
  for (int64_t j = 0; j < len; ++j) {
    const int64_t at = (table[j / bs] * bs + j % bs) * slot + h * dim;
    const uint32_t* k = reinterpret_cast<const uint32_t*>(kc + at);
    const uint16_t* v = reinterpret_cast<const uint16_t*>(vc + at);
    const int64_t c = j / kChunk, jj = j % kChunk;
    uint32_t* kd = kp + c * half * kChunk + jj;
    for (int64_t p = 0; p < half; ++p) kd[p * kChunk] = k[p];
    uint16_t* vd = reinterpret_cast<uint16_t*>(vp + c * (kChunk / 2) * dim + (jj / 2) * dim);
    for (int64_t d = 0; d < dim; ++d) vd[2 * d + (jj & 1)] = v[d];
  }
}

// Online softmax of one chunk's scores: row r sees `visible[r]` keys (<= 0: none). Writes P
// as bfloat16, rescales the accumulator rows, updates each row's peak and total.
static void softmax_chunk(const float* sc, const int64_t* visible, int64_t rows, int64_t dim,
                          float scale, bf16* p, float* acc, float* peak, float* total) {
  constexpr int64_t V = kChunk / 16;
  for (int64_t r = 0; r < rows; ++r) {
    bf16* pr = p + r * kChunk;
    if (visible[r] <= 0) {
      std::memset(pr, 0, kChunk * sizeof(bf16));
      continue;
    }
    __m512 s[V];
    __m512 top = _mm512_set1_ps(kMasked);
    for (int64_t c = 0; c < V; ++c) {
      const __mmask16 seen = first_lanes(std::max<int64_t>(visible[r] - 16 * c, 0));
      s[c] = _mm512_mask_mov_ps(_mm512_set1_ps(kMasked), seen,
                                _mm512_mul_ps(_mm512_loadu_ps(sc + r * kChunk + 16 * c),
                                              _mm512_set1_ps(scale)));
      top = _mm512_max_ps(top, s[c]);
    }
    const float new_peak = std::max(peak[r], _mm512_reduce_max_ps(top));
    const float alpha = std::exp(peak[r] - new_peak);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < V; ++c) {
      const __mmask16 seen = first_lanes(std::max<int64_t>(visible[r] - 16 * c, 0));
      const __m512 e = _mm512_maskz_mov_ps(seen, exp16(_mm512_sub_ps(s[c], _mm512_set1_ps(new_peak))));
      sum = _mm512_add_ps(sum, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + 16 * c),
                          (__m256i)_mm512_cvtneps_pbh(e));
    }
    total[r] = total[r] * alpha + _mm512_reduce_add_ps(sum);
    peak[r] = new_peak;
    if (alpha != 1.f) {
      float* a = acc + r * dim;
      for (int64_t d = 0; d < dim; d += 16)
        _mm512_storeu_ps(a + d, _mm512_mul_ps(_mm512_loadu_ps(a + d), _mm512_set1_ps(alpha)));
    }
  }
}

// The products without tiles (AVX512-BF16's vdpbf16ps on the same packed layouts): R rows
// at a time share each packed vector they load; a row's pair of bfloat16 is one 32-bit
// broadcast. scores: sc[r][0..64) = q[r] . K^T chunk (overwritten).
template <int R>
static inline void scores_rows(const bf16* q, int64_t dim, const uint32_t* kp, float* sc) {
  constexpr int V = kChunk / 16;
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t half = dim / 2;
  for (int64_t p = 0; p < half; ++p) {
    __m512bh k[V];
    for (int c = 0; c < V; ++c) k[c] = (__m512bh)_mm512_loadu_si512(kp + p * kChunk + 16 * c);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, q + r * dim + 2 * p, sizeof(pair));
      const __m512bh qr = (__m512bh)_mm512_set1_epi32(pair);
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qr, k[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) _mm512_storeu_ps(sc + r * kChunk + 16 * c, acc[r][c]);
}

// acc[r][0..DIM) += P[r][0..64) x V chunk (pairs of keys).
template <int R, int DIM>
static inline void values_rows(const bf16* p, const uint32_t* vp, float* acc) {
  constexpr int VD = DIM / 16;
  __m512 a[R][VD];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < VD; ++c) a[r][c] = _mm512_loadu_ps(acc + r * DIM + 16 * c);
  for (int64_t jj = 0; jj < kChunk / 2; ++jj) {
    __m512bh v[VD];
    for (int c = 0; c < VD; ++c) v[c] = (__m512bh)_mm512_loadu_si512(vp + jj * DIM + 16 * c);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, p + r * kChunk + 2 * jj, sizeof(pair));
      const __m512bh w = (__m512bh)_mm512_set1_epi32(pair);
      for (int c = 0; c < VD; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], w, v[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < VD; ++c) _mm512_storeu_ps(acc + r * DIM + 16 * c, a[r][c]);
}

static void scores_product(bool tiles, int64_t rows, int64_t dim, const bf16* q,
                           const uint32_t* kp, float* sc) {
  if (tiles) {
    cpublas::brgemm(rows, kChunk, dim, dim, kChunk, kChunk, false, q,
                    reinterpret_cast<const bf16*>(kp), sc);
    return;
  }
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) scores_rows<4>(q + r * dim, dim, kp, sc + r * kChunk);
  for (; r < rows; ++r) scores_rows<1>(q + r * dim, dim, kp, sc + r * kChunk);
}

template <int DIM>
static void values_by_dim(int64_t rows, const bf16* p, const uint32_t* vp, float* acc) {
  constexpr int R = DIM > 64 ? 2 : 4;  // R x DIM / 16 accumulators: 16 of the 32 registers
  int64_t r = 0;
  for (; r + R <= rows; r += R) values_rows<R, DIM>(p + r * kChunk, vp, acc + r * DIM);
  for (; r < rows; ++r) values_rows<1, DIM>(p + r * kChunk, vp, acc + r * DIM);
}

static void values_product(bool tiles, int64_t rows, int64_t dim, const bf16* p,
                           const uint32_t* vp, float* acc) {
  if (tiles) {
    cpublas::brgemm(rows, dim, kChunk, kChunk, dim, dim, true, p,
                    reinterpret_cast<const bf16*>(vp), acc);
    return;
  }
  switch (dim) {  // bf16_prefill_serves admits only these without tiles
    case 32: return values_by_dim<32>(rows, p, vp, acc);
    case 64: return values_by_dim<64>(rows, p, vp, acc);
    case 128: return values_by_dim<128>(rows, p, vp, acc);
    default: TORCH_CHECK(false, "head size ", dim, " needs AMX tiles");
  }
}

static void tile_task(bool tiles, const bf16* q, const uint32_t* kp, const uint32_t* vp, int64_t prefix,
                      int64_t t0, int64_t tokens, int64_t h, int64_t group, int64_t heads,
                      int64_t dim, float scale, bf16* qbuf, float* sc, bf16* p, float* acc,
                      float* peak, float* total, int64_t* visible, bf16* out) {
  const int64_t rows = tokens * group, half = dim / 2;
  for (int64_t r = 0; r < rows; ++r) {  // row r: token r / group, query head h * group + r % group
    std::memcpy(qbuf + r * dim, q + (t0 + r / group) * heads * dim + (h * group + r % group) * dim,
                dim * sizeof(bf16));
    peak[r] = kMasked;
    total[r] = 0.f;
  }
  std::fill(acc, acc + rows * dim, 0.f);
  const int64_t kv_end = prefix + t0 + tokens;  // the tile's last row sees keys < kv_end
  for (int64_t c = 0; c * kChunk < kv_end; ++c) {
    for (int64_t r = 0; r < rows; ++r)
      visible[r] = std::min(kChunk, prefix + t0 + r / group + 1 - c * kChunk);
    scores_product(tiles, rows, dim, qbuf, kp + c * half * kChunk, sc);
    softmax_chunk(sc, visible, rows, dim, scale, p, acc, peak, total);
    values_product(tiles, rows, dim, p, vp + c * (kChunk / 2) * dim, acc);
  }
  for (int64_t r = 0; r < rows; ++r) {
    bf16* o = out + (t0 + r / group) * heads * dim + (h * group + r % group) * dim;
    const float inv = 1.f / total[r];
    for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<bf16>(acc[r * dim + d] * inv);
  }
}
#endif

torch::Tensor prefill_attention_bf16(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                    torch::Tensor block_tables, torch::Tensor query_starts,
                                    torch::Tensor seq_lens, double scale) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k_cache.scalar_type() == at::kBFloat16 &&
              v_cache.scalar_type() == at::kBFloat16, "the bfloat16 prompt kernel takes bfloat16 only");
  const PromptRuns r = prompt_runs(q, k_cache, v_cache, block_tables, query_starts, seq_lens);
  const int64_t heads = q.size(1), dim = q.size(2);
  const int64_t bs = k_cache.size(1), kv_heads = k_cache.size(2);
  TORCH_CHECK(dim % 32 == 0, "head size must be a multiple of 32");
  auto qc = q.contiguous();
  const int64_t runs = r.count, width = r.tables.size(1), group = heads / kv_heads;
  const int* st = r.starts.data_ptr<int>();
  const int* ln = r.lens.data_ptr<int>();
  std::vector<int64_t> offset(runs + 1, 0);  // each run's first chunk in the packed buffers
  for (int64_t s = 0; s < runs; ++s) offset[s + 1] = offset[s] + (ln[s] + kChunk - 1) / kChunk;
  auto out = torch::empty_like(qc);
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const int64_t chunk_words = kChunk * dim / 2;  // one chunk of K^T (or of V) in 32-bit words
  auto kp = torch::empty({offset[runs] * kv_heads * chunk_words}, q.options().dtype(torch::kInt));
  auto vp = torch::empty_like(kp);
  uint32_t* kpp = reinterpret_cast<uint32_t*>(kp.data_ptr<int>());
  uint32_t* vpp = reinterpret_cast<uint32_t*>(vp.data_ptr<int>());
  const bf16* kc = k_cache.data_ptr<bf16>();
  const bf16* vc = v_cache.data_ptr<bf16>();
  const int* tb = r.tables.data_ptr<int>();
  const bf16* qp = qc.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  std::vector<int64_t> tasks;  // (run, kv head, first query token), flattened
  for (int64_t s = 0; s < runs; ++s)
    for (int64_t t0 = 0; t0 < st[s + 1] - st[s]; t0 += kTile)
      for (int64_t h = 0; h < kv_heads; ++h) tasks.insert(tasks.end(), {s, h, t0});
  const int64_t num_tasks = static_cast<int64_t>(tasks.size()) / 3;
  const float sc_scale = static_cast<float>(scale);
  const bool tiles = amx_ready();
#pragma omp parallel num_threads(at::get_num_threads())
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < runs * kv_heads; ++i) {
      const int64_t s = i / kv_heads, h = i % kv_heads;
      const int64_t first = (offset[s] * kv_heads + h * (offset[s + 1] - offset[s])) * chunk_words;
      pack_context(kc, vc, tb + s * width, ln[s], bs, kv_heads * dim, h, dim, kpp + first,
                   vpp + first);
    }
    const int64_t rows_max = kTile * group;
    std::vector<bf16> qbuf(rows_max * dim), p(rows_max * kChunk);
    std::vector<float> sc(rows_max * kChunk), acc(rows_max * dim), peak(rows_max),
        total(rows_max);
    std::vector<int64_t> visible(rows_max);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < num_tasks; ++i) {
      // Latest tiles first: they read the most keys, and the short ones fill in behind.
      const int64_t* task = tasks.data() + 3 * (num_tasks - 1 - i);
      const int64_t s = task[0], h = task[1], t0 = task[2];
      const int64_t q_len = st[s + 1] - st[s];
      const int64_t first = (offset[s] * kv_heads + h * (offset[s + 1] - offset[s])) * chunk_words;
      tile_task(tiles, qp + st[s] * heads * dim, kpp + first, vpp + first, ln[s] - q_len, t0,
                std::min(kTile, q_len - t0), h, group, heads, dim, sc_scale, qbuf.data(),
                sc.data(), p.data(), acc.data(), peak.data(), total.data(), visible.data(),
                op + st[s] * heads * dim);
    }
    if (tiles) cpublas::brgemm_release();
  }
#else
  TORCH_CHECK(false, "the bfloat16 prompt kernel needs an AVX512-BF16 build");
#endif
  return out;
}

TORCH_LIBRARY_FRAGMENT(inferplane, m) {
  m.def("cpu_prefill_attention_bf16(Tensor q, Tensor k_cache, Tensor v_cache, "
        "Tensor block_tables, Tensor query_starts, Tensor seq_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(inferplane, CPU, m) {
  m.impl("cpu_prefill_attention_bf16", &prefill_attention_bf16);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("amx_ready", torch::wrap_pybind_function(amx_ready), "amx_ready");
}
