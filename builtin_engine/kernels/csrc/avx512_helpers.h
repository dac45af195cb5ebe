// Vector loads of 16 K/V values as float32 and exp on 16 lanes, for the kernels' AVX-512
// paths (empty of code where the compiler does not target AVX-512).
#pragma once
#include <torch/extension.h>
#ifdef __AVX512F__
#include <immintrin.h>

template <typename T>
static inline __m512 load16(const T* p) {  // any other dtype (double): element by element
  alignas(64) float f[16];
  for (int e = 0; e < 16; ++e) f[e] = static_cast<float>(p[e]);
  return _mm512_load_ps(f);
}
static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const c10::BFloat16* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}

// The first min(n, 16) lanes (n >= 0).
static inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

// exp on 16 lanes: 2^n * p(r), |r| <= ln2 / 2, a degree-6 Taylor polynomial (rel. err ~2e-7).
static inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 y = _mm512_set1_ps(1.f / 720);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f / 120));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f / 24));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f / 6));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, n);
}
#endif
