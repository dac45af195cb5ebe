// The C++ of kernels/cpu_activation.py (its docstring says what and why); built by
// kernels/cpu_extension.py. The end registers the op with torch's dispatcher (schema and CPU
// kernel), so a call from Python or a compiled graph reaches the kernel without Python.
#include "avx512_helpers.h"
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// bfloat16(silu(g)) on 16 lanes of float32 (exact bfloat16 values), still in float32 lanes.
static inline __m512 silu16(__m512 g) {
  // -g clamped: exp16 only bounds its input from below, and 1 / (1 + inf) through a
  // reciprocal estimate is 0 * inf
  const __m512 e = exp16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), g),
                                       _mm512_set1_ps(87.f)));
  const __m512 d = _mm512_add_ps(e, _mm512_set1_ps(1.f));
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.f)));  // Newton: r(2 - dr)
  return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(_mm512_mul_ps(g, r)));
}

static inline __m512 load_bf16(const c10::BFloat16* p, __mmask16 m) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

static void silu_and_mul_rows(const c10::BFloat16* x, c10::BFloat16* out, int64_t rows,
                              int64_t half, int64_t x_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const c10::BFloat16* gate = x + r * x_stride;
    const c10::BFloat16* up = gate + half;
    c10::BFloat16* o = out + r * half;
    for (int64_t c = 0; c < half; c += 16) {
      const __mmask16 m = first_lanes(half - c);
      const __m512 y = _mm512_mul_ps(silu16(load_bf16(gate + c, m)), load_bf16(up + c, m));
      _mm256_mask_storeu_epi16(o + c, m, (__m256i)_mm512_cvtneps_pbh(y));
    }
  }
}
#endif

torch::Tensor silu_and_mul(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 2 == 0 && x.stride(1) == 1,
              "x [T, 2I] with unit stride along its last dimension");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "bfloat16 only");
  const int64_t rows = x.size(0), half = x.size(1) / 2;
  auto out = torch::empty({rows, half}, x.options());
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const auto* in = x.data_ptr<c10::BFloat16>();
  auto* o = out.data_ptr<c10::BFloat16>();
  const int64_t stride = x.stride(0);
  // ~16 rows a task: a row of 1,536 pairs is ~1 us, so a task amortises handing it out
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    silu_and_mul_rows(in + begin * stride, o + begin * half, end - begin, half, stride);
  });
#else
  TORCH_CHECK(false, "built without AVX512-BF16");
#endif
  return out;
}

bool serves() {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

TORCH_LIBRARY_FRAGMENT(inferplane, m) { m.def("cpu_silu_and_mul(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(inferplane, CPU, m) { m.impl("cpu_silu_and_mul", &silu_and_mul); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("serves", torch::wrap_pybind_function(serves), "serves");
}
