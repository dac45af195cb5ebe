"""Builds and caches the engine's small C++ CPU kernels, once per machine.

    module = load_extension("inferplane_cpu_decode_attention", SOURCE, ("decode_attention",))
    if module is not None:                    # None: no compiler, or switched off
        out = module.decode_attention(...)

The build uses the C++ compiler inductor uses (`-O3 -march=native -ffast-math -fopenmp`;
about 40 s a kernel) into `~/.cache/inferplane/extensions` (INFERPLANE_EXTENSIONS_DIR
overrides it). The module name hashes the source, the torch version and the CPU's flags, so a
cache directory shared between machines never loads code built for another CPU, and an edited
kernel is rebuilt. `INFERPLANE_CPU_ATTENTION=0` switches every kernel off: the traced and SDPA
paths serve instead, as they do wherever no compiler works.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import time

import torch

logger = logging.getLogger(__name__)

# Vector loads of 16 K/V values as float32 and exp on 16 lanes, for the kernels' AVX-512 paths
# (prepend to a source; empty of code where the compiler does not target AVX-512).
AVX512_HELPERS = r"""
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
"""

# The prompt-attention kernels' shared argument checks: q [T, Hq, D] against caches
# [N, bs, Hk, D] and the runs (one table row, query start and context length each) as int32.
PROMPT_RUNS = r"""
#include <torch/extension.h>

struct PromptRuns {
  torch::Tensor tables, starts, lens;
  int64_t count;
};

static PromptRuns prompt_runs(const torch::Tensor& q, const torch::Tensor& k_cache,
                              const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                              const torch::Tensor& query_starts, const torch::Tensor& seq_lens) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4, "q [T, Hq, D], caches [N, bs, Hk, D]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "K and V caches differ in dtype");
  const int64_t bs = k_cache.size(1);
  TORCH_CHECK(q.size(1) % k_cache.size(2) == 0 && k_cache.size(3) == q.size(2),
              "head shapes disagree");
  auto tables = block_tables.to(torch::kInt).contiguous();
  auto starts = query_starts.to(torch::kInt).contiguous();
  auto lens = seq_lens.to(torch::kInt).contiguous();
  const int64_t runs = lens.size(0);
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == runs && starts.size(0) == runs + 1,
              "one table row and one query start per run, plus the end");
  const int* st = starts.data_ptr<int>();
  const int* ln = lens.data_ptr<int>();
  TORCH_CHECK(st[0] == 0 && st[runs] == q.size(0), "query starts must cover q");
  for (int64_t s = 0; s < runs; ++s) {
    const int64_t q_len = st[s + 1] - st[s];
    TORCH_CHECK(q_len >= 1 && ln[s] >= q_len, "a run needs query rows within its context");
    TORCH_CHECK((ln[s] + bs - 1) / bs <= tables.size(1), "a run's context exceeds its table");
  }
  return {tables, starts, lens, runs};
}
"""

DISABLE_ENV = "INFERPLANE_CPU_ATTENTION"  # "0" keeps the traced / SDPA attention


def _build_dir() -> str:
    # Not under the data directory: one build per machine serves every engine (and test).
    return os.environ.get("INFERPLANE_EXTENSIONS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "inferplane", "extensions")


def _module_name(prefix: str, source: str) -> str:
    from builtin_engine.device_defaults import cpu_flags
    key = source + torch.__version__ + " ".join(sorted(cpu_flags()))
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@functools.cache
def load_extension(prefix: str, source: str, functions: tuple[str, ...]):
    """The built module, or None (no compiler, or switched off); built at most once a process
    (cached on the arguments, so `functions` is a tuple)."""
    if os.environ.get(DISABLE_ENV, "").strip() == "0":
        return None
    from torch.utils.cpp_extension import load_inline
    name = _module_name(prefix, source)
    directory = os.path.join(_build_dir(), name)
    os.makedirs(directory, exist_ok=True)
    started = time.monotonic()
    try:
        module = load_inline(
            name=name, cpp_sources=source, functions=list(functions),
            extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
            extra_ldflags=["-fopenmp"], build_directory=directory, verbose=False)
    except Exception as exc:  # no compiler, headers missing: the torch paths serve
        logger.warning("CPU kernel %s unavailable (%s); using the torch path", prefix,
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    logger.info("CPU kernel %s ready in %.1fs (%s)", prefix, time.monotonic() - started,
                directory)
    return module
