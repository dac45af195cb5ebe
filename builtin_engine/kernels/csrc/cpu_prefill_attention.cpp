// The C++ of kernels/cpu_prefill_attention.py (its docstring says what and why); built by
// kernels/cpu_extension.py. The end registers the op with torch's dispatcher (schema and CPU
// kernel), so a call from Python or a compiled graph reaches the kernel without Python.
#include "avx512_helpers.h"
#include "prompt_runs.h"
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

// Finite: the build uses -ffast-math, which assumes no infinities.
static constexpr float kMasked = -1e30f;
static constexpr int64_t kTile = 32;

#ifdef __AVX512F__
template <typename T, int DIM>
static void prefill_block16(const float* qs, const T* kc, const T* vc, const int* table,
                           int64_t prefix, int64_t t0, int64_t tokens, int64_t h,
                           int64_t group, int64_t heads, int64_t slot, float scale,
                           float* qbuf, float* kt, float* vf, float* sc, float* acc,
                           float* peak, float* total, float* out) {
  constexpr int64_t BS = 16, VD = DIM / 16;
  const int64_t rows = tokens * group;
  for (int64_t r = 0; r < rows; ++r) {  // this tile's query rows, scaled, in row order
    const float* qr = qs + (r / group) * heads * DIM + (h * group + r % group) * DIM;
    for (int64_t d = 0; d < DIM; ++d) qbuf[r * DIM + d] = qr[d] * scale;
    peak[r] = kMasked;
    total[r] = 0.f;
  }
  std::fill(acc, acc + rows * DIM, 0.f);
  const int64_t kv_end = prefix + t0 + tokens;
  for (int64_t start = 0; start < kv_end; start += BS) {
    const int64_t n = std::min(BS, kv_end - start);
    const int64_t block = table[start / BS];
    const T* k = kc + block * BS * slot + h * DIM;
    const T* v = vc + block * BS * slot + h * DIM;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < VD; ++c) {
        _mm512_storeu_ps(vf + j * DIM + 16 * c, load16(v + j * slot + 16 * c));
        alignas(64) float row[16];
        _mm512_store_ps(row, load16(k + j * slot + 16 * c));
        for (int64_t e = 0; e < 16; ++e) kt[(16 * c + e) * BS + j] = row[e];
      }
    }
    for (int64_t j = n; j < BS; ++j)  // a partial last block: its empty slots score 0
      for (int64_t d = 0; d < DIM; ++d) kt[d * BS + j] = 0.f;
    // scores: four rows at a time share each key column load
    for (int64_t r = 0; r < rows; r += 4) {
      const float* q0 = qbuf + r * DIM;
      const float* q1 = qbuf + std::min(r + 1, rows - 1) * DIM;
      const float* q2 = qbuf + std::min(r + 2, rows - 1) * DIM;
      const float* q3 = qbuf + std::min(r + 3, rows - 1) * DIM;
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t d = 0; d < DIM; ++d) {
        const __m512 kd = _mm512_loadu_ps(kt + d * BS);
        s0 = _mm512_fmadd_ps(_mm512_set1_ps(q0[d]), kd, s0);
        s1 = _mm512_fmadd_ps(_mm512_set1_ps(q1[d]), kd, s1);
        s2 = _mm512_fmadd_ps(_mm512_set1_ps(q2[d]), kd, s2);
        s3 = _mm512_fmadd_ps(_mm512_set1_ps(q3[d]), kd, s3);
      }
      _mm512_storeu_ps(sc + r * BS, s0);
      if (r + 1 < rows) _mm512_storeu_ps(sc + (r + 1) * BS, s1);
      if (r + 2 < rows) _mm512_storeu_ps(sc + (r + 2) * BS, s2);
      if (r + 3 < rows) _mm512_storeu_ps(sc + (r + 3) * BS, s3);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = std::min(n, prefix + t0 + r / group - start + 1);
      if (visible <= 0) continue;  // the row's position lies before this block
      const __mmask16 seen = first_lanes(visible);
      const __m512 s = _mm512_mask_mov_ps(_mm512_set1_ps(kMasked), seen,
                                          _mm512_loadu_ps(sc + r * BS));
      const float new_peak = std::max(peak[r], _mm512_reduce_max_ps(s));
      const float alpha = std::exp(peak[r] - new_peak);
      const __m512 p = _mm512_maskz_mov_ps(seen, exp16(_mm512_sub_ps(s, _mm512_set1_ps(new_peak))));
      total[r] = total[r] * alpha + _mm512_reduce_add_ps(p);
      peak[r] = new_peak;
      alignas(64) float pj[16];
      _mm512_store_ps(pj, p);
      float* a = acc + r * DIM;
      __m512 av[VD];
      for (int64_t c = 0; c < VD; ++c)
        av[c] = _mm512_mul_ps(_mm512_loadu_ps(a + 16 * c), _mm512_set1_ps(alpha));
      for (int64_t j = 0; j < visible; ++j) {
        const __m512 pv = _mm512_set1_ps(pj[j]);
        for (int64_t c = 0; c < VD; ++c)
          av[c] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(vf + j * DIM + 16 * c), av[c]);
      }
      for (int64_t c = 0; c < VD; ++c) _mm512_storeu_ps(a + 16 * c, av[c]);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + (r / group) * heads * DIM + (h * group + r % group) * DIM;
    const float inv = 1.f / total[r];
    for (int64_t d = 0; d < DIM; ++d) o[d] = acc[r * DIM + d] * inv;
  }
}
#endif

template <typename T, int DIM>
static void prefill(const float* q, const T* kc, const T* vc, const int* tables,
                    const int* starts, const int* lens, float* out, int64_t runs,
                    int64_t width, int64_t bs, int64_t kv_heads, int64_t group,
                    int64_t dim_arg, float scale) {
  const int64_t dim = DIM > 0 ? DIM : dim_arg;
  const int64_t heads = kv_heads * group;
  const int64_t slot = kv_heads * dim;  // one slot of a block: every KV head's row
  std::vector<int64_t> tasks;  // (run, kv head, first query token), flattened
  for (int64_t s = 0; s < runs; ++s)
    for (int64_t t0 = 0; t0 < starts[s + 1] - starts[s]; t0 += kTile)
      for (int64_t h = 0; h < kv_heads; ++h) tasks.insert(tasks.end(), {s, h, t0});
  const int64_t num_tasks = static_cast<int64_t>(tasks.size()) / 3;
#pragma omp parallel num_threads(at::get_num_threads())
  {
    const int64_t rows_max = kTile * group;
    std::vector<float> kt(dim * bs), scores(rows_max * bs), acc(rows_max * dim),
        peak(rows_max), total(rows_max), qbuf(rows_max * dim), vf(bs * dim);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < num_tasks; ++i) {
      // Latest tiles first: they read the most keys, and the short ones fill in behind.
      const int64_t* task = tasks.data() + 3 * (num_tasks - 1 - i);
      const int64_t s = task[0], h = task[1], t0 = task[2];
      const int64_t q_len = starts[s + 1] - starts[s];
      const int64_t prefix = lens[s] - q_len;
      const int64_t tokens = std::min(kTile, q_len - t0);
      const int64_t rows = tokens * group;  // row r: token r / group, head h * group + r % group
      const float* qs = q + (starts[s] + t0) * heads * dim;
#ifdef __AVX512F__
      if (DIM > 0 && DIM % 16 == 0 && bs == 16) {
        prefill_block16<T, (DIM > 0 ? DIM : 16)>(
            qs, kc, vc, tables + s * width, prefix, t0, tokens, h, group, heads, slot, scale,
            qbuf.data(), kt.data(), vf.data(), scores.data(), acc.data(), peak.data(),
            total.data(), out + (starts[s] + t0) * heads * dim);
        continue;
      }
#endif
      std::fill(peak.begin(), peak.begin() + rows, kMasked);
      std::fill(total.begin(), total.begin() + rows, 0.f);
      std::fill(acc.begin(), acc.begin() + rows * dim, 0.f);
      const int64_t kv_end = prefix + t0 + tokens;  // the tile's last row sees keys < kv_end
      for (int64_t start = 0; start < kv_end; start += bs) {
        const int64_t n = std::min(bs, kv_end - start);
        const int64_t block = tables[s * width + start / bs];
        const T* k = kc + block * bs * slot + h * dim;
        const T* v = vc + block * bs * slot + h * dim;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t d = 0; d < dim; ++d) kt[d * bs + j] = static_cast<float>(k[j * slot + d]);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t tok = r / group;
          const float* qr = qs + tok * heads * dim + (h * group + r % group) * dim;
          float* sr = scores.data() + r * bs;
          std::fill(sr, sr + n, 0.f);
          for (int64_t d = 0; d < dim; ++d) {
            const float qd = qr[d] * scale;
            const float* kd = kt.data() + d * bs;
            for (int64_t j = 0; j < n; ++j) sr[j] += qd * kd[j];
          }
          // keys of this block the row may see: positions <= its own
          const int64_t visible = std::min(n, prefix + t0 + tok - start + 1);
          for (int64_t j = std::max<int64_t>(visible, 0); j < n; ++j) sr[j] = kMasked;
          if (visible <= 0) continue;
          float block_peak = sr[0];
          for (int64_t j = 1; j < n; ++j) block_peak = std::max(block_peak, sr[j]);
          const float new_peak = std::max(peak[r], block_peak);
          const float alpha = std::exp(peak[r] - new_peak);
          float sum = 0.f;
          for (int64_t j = 0; j < n; ++j) {
            sr[j] = j < visible ? std::exp(sr[j] - new_peak) : 0.f;
            sum += sr[j];
          }
          total[r] = total[r] * alpha + sum;
          peak[r] = new_peak;
          float* a = acc.data() + r * dim;
          for (int64_t d = 0; d < dim; ++d) a[d] *= alpha;
          for (int64_t j = 0; j < visible; ++j) {
            const float p = sr[j];
            const T* vj = v + j * slot;
            for (int64_t d = 0; d < dim; ++d) a[d] += p * static_cast<float>(vj[d]);
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t tok = r / group;
        float* o = out + (starts[s] + t0 + tok) * heads * dim + (h * group + r % group) * dim;
        const float inv = 1.f / total[r];
        const float* a = acc.data() + r * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = a[d] * inv;
      }
    }
  }
}

// Which bfloat16 inputs go to inferplane::cpu_prefill_attention_bf16 (another extension):
// none until kernels/cpu_prefill_attention.py has asked bf16_prefill_engine() and set it.
enum Bf16Route : int { kNoRoute = 0, kVectorHeads = 1, kAnyHead = 2 };  // none, 32/64/128, AMX
static std::atomic<int> bf16_route{kNoRoute};

void route_bf16(int64_t route) { bf16_route.store(static_cast<int>(route)); }

static bool takes_bf16(const torch::Tensor& q, const torch::Tensor& k_cache) {
  const int route = bf16_route.load(std::memory_order_relaxed);
  const int64_t dim = q.size(-1);
  if (route == kNoRoute || q.scalar_type() != at::kBFloat16 ||
      k_cache.scalar_type() != at::kBFloat16 || dim % 32)
    return false;
  return route == kAnyHead || dim == 32 || dim == 64 || dim == 128;
}

torch::Tensor prefill_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                                torch::Tensor block_tables, torch::Tensor query_starts,
                                torch::Tensor seq_lens, double scale) {
  if (q.dim() == 3 && takes_bf16(q, k_cache)) {
    static const auto bf16 = c10::Dispatcher::singleton()
        .findSchemaOrThrow("inferplane::cpu_prefill_attention_bf16", "")
        .typed<decltype(prefill_attention)>();
    return bf16.call(q, k_cache, v_cache, block_tables, query_starts, seq_lens, scale);
  }
  const PromptRuns r = prompt_runs(q, k_cache, v_cache, block_tables, query_starts, seq_lens);
  const int64_t heads = q.size(1), dim = q.size(2);
  const int64_t bs = k_cache.size(1), kv_heads = k_cache.size(2);
  auto qf = q.to(torch::kFloat).contiguous();
  auto out = torch::empty({q.size(0), heads, dim}, qf.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, k_cache.scalar_type(), "prefill", [&] {
    auto run = dim == 64 ? prefill<scalar_t, 64> : dim == 128 ? prefill<scalar_t, 128>
                                                                : prefill<scalar_t, 0>;
    run(qf.data_ptr<float>(), k_cache.data_ptr<scalar_t>(), v_cache.data_ptr<scalar_t>(),
        r.tables.data_ptr<int>(), r.starts.data_ptr<int>(), r.lens.data_ptr<int>(),
        out.data_ptr<float>(), r.count, r.tables.size(1), bs,
        kv_heads, heads / kv_heads, dim, static_cast<float>(scale));
  });
  return out.to(q.scalar_type());
}

TORCH_LIBRARY_FRAGMENT(inferplane, m) {
  m.def("cpu_prefill_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
        "Tensor query_starts, Tensor seq_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(inferplane, CPU, m) { m.impl("cpu_prefill_attention", &prefill_attention); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("route_bf16", torch::wrap_pybind_function(route_bf16), "route_bf16");
}
