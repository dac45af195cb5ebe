// The compiled step's two glue ops in C++ (kernels/step_ops.py says why), registered with
// torch's dispatcher so that a graph's call reaches ATen without entering Python:
//   inferplane::store_kv(key, value, k_cache!, v_cache!, slot_mapping)  K/V rows into the cache
//   inferplane::packed_linear(x, weight)   x @ weight.T on weight's tile copy (few rows, AMX) or
//                                         its oneDNN packed copy, if it has one
// The copies are those kernels/packed_linear.py made; it mirrors its table here
// (remember / remember_tiles / forget / set_row_cap) so the op finds them by the dense
// weight's address.
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

// Rows of `src` (n rows, each one contiguous run of `row` elements, `stride` elements apart)
// into the slots of `cache` that `slots` [n] name. ATen's index_copy_ spent 46 us on a
// 64-row decode step's K (or V) through TensorIterator, ~2.8 ms of the step over 30 layers;
// a row is a few hundred contiguous bytes. The value rows are usually a slice of the fused
// QKV projection's output, so rows need not be adjacent.
template <typename I>
static void copy_rows(const at::Tensor& src, int64_t row, int64_t stride, const at::Tensor& cache,
                      const at::Tensor& slots) {
  const int64_t n = slots.numel(), capacity = cache.size(0) * cache.size(1);
  const int64_t size = src.element_size(), bytes = row * size;
  const I* slot = slots.data_ptr<I>();
  for (int64_t i = 0; i < n; ++i)  // all checked before any row is written
    TORCH_CHECK(slot[i] >= 0 && slot[i] < capacity, "store_kv: slot ", slot[i],
                " is outside the KV cache (", capacity, " slots)");
  const char* from = static_cast<const char*>(src.data_ptr());
  char* to = static_cast<char*>(cache.data_ptr());
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(to + slot[i] * bytes, from + i * stride * size, bytes);
}

// The elements of each row (dims 1..) as one contiguous run: the row stride, or -1.
static int64_t row_stride(const at::Tensor& rows) {
  int64_t expected = 1;
  for (int64_t d = rows.dim() - 1; d >= 1; --d) {
    if (rows.size(d) != 1 && rows.stride(d) != expected) return -1;
    expected *= rows.size(d);
  }
  return rows.stride(0);
}

// The direct copy where it applies: CPU tensors, a contiguous cache, rows already in its
// dtype, each row one contiguous run of a slot's elements.
static bool store_rows(const at::Tensor& rows, const at::Tensor& cache, const at::Tensor& slots) {
  const int64_t slot_elems = cache.size(2) * cache.size(3);
  if (!(rows.is_cpu() && cache.is_cpu() && slots.is_cpu() && cache.is_contiguous() &&
        slots.is_contiguous() && slots.dim() == 1 && rows.dim() >= 2 &&
        rows.size(0) == slots.numel() && rows.scalar_type() == cache.scalar_type() &&
        rows.numel() == slots.numel() * slot_elems))
    return false;
  const int64_t stride = row_stride(rows);
  if (stride < 0) return false;
  if (slots.scalar_type() == at::kLong) copy_rows<int64_t>(rows, slot_elems, stride, cache, slots);
  else if (slots.scalar_type() == at::kInt) copy_rows<int32_t>(rows, slot_elems, stride, cache, slots);
  else return false;
  return true;
}

void store_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
              const at::Tensor& v_cache, const at::Tensor& slot_mapping) {
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.dim() == 4, "caches [blocks, block_size, Hk, D]");
  const int64_t heads = k_cache.size(2), dim = k_cache.size(3);
  if (!store_rows(key, k_cache, slot_mapping))
    k_cache.view({-1, heads, dim})
        .index_copy_(0, slot_mapping.to(at::kLong), key.to(k_cache.scalar_type()));
  if (!store_rows(value, v_cache, slot_mapping))
    v_cache.view({-1, heads, dim})
        .index_copy_(0, slot_mapping.to(at::kLong), value.to(v_cache.scalar_type()));
}

namespace {

struct PackedTable {
  std::shared_mutex lock;  // written at load and when a weight is freed, read every call
  std::unordered_map<int64_t, at::Tensor> copies;  // dense weight address -> packed copy
  std::unordered_map<int64_t, at::Tensor> tiles;   // dense weight address -> tile copy
  std::atomic<int64_t> row_cap{512};
};

PackedTable& table() {
  // Never destroyed: tensors freed during static destruction at exit gain nothing.
  static auto* t = new PackedTable();
  return *t;
}

at::Tensor packed_mm(const at::Tensor& x, const at::Tensor& packed) {
  static const auto op = c10::Dispatcher::singleton()
      .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                        c10::string_view, c10::List<std::optional<at::Scalar>>,
                        std::optional<c10::string_view>)>();
  return op.call(x, packed, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(),
                 c10::string_view(""));
}

// ---- the tile path: few rows against a weight in AMX's pair layout ----------------------
// oneDNN's `_linear_pointwise` spends 25-40 us a call outside its GEMM (primitive look-up,
// attributes, output): on 2 AMX cores a 960 x 576 bfloat16 projection took 57-80 us at 1-64
// rows where the GEMM itself ran ~25-40 us. A decode step makes 121 such calls. Here each
// task is one 32-column block of the weight, stored as one contiguous run in the pair layout
// the tile product reads ([K/2][32][2]: two bfloat16 of a column per 32-bit word), multiplied
// by ATen's brgemm (oneDNN's AMX micro-kernel) into float32 and rounded to bfloat16 as it is
// stored. Measured there with the weights read from memory: 960 x 576 at 16 / 64 rows 110 /
// 133 -> 74 / 114 us, 576 x 1536 157 / 198 -> 109 / 175 us (docs/bench/README.md has the
// table). Past 64 rows, and for a wide weight (the LM head) past 32, oneDNN's blocking of the
// rows wins and is kept; static halves of the blocks beat a dynamic hand-out.
constexpr int64_t kTileColumns = 32;
constexpr int64_t kTileRowsMax = 64, kTileRowsWide = 32, kWideColumns = 8192;

// Whether tile copies serve here: AMX tiles, and a build with the AVX512-BF16 rounding.
bool tiles_ready() {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  return at::native::cpublas::could_pack(at::kBFloat16);
#else
  return false;
#endif
}

static bool tile_path_serves(const at::Tensor& x, const at::Tensor& weight, int64_t rows) {
  return x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 &&
         rows >= 1 && rows <= (weight.size(0) > kWideColumns ? kTileRowsWide : kTileRowsMax);
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
static at::Tensor tile_linear(const at::Tensor& x, const at::Tensor& tiles, int64_t columns) {
  using bf16 = c10::BFloat16;
  const int64_t depth = x.size(-1), rows = x.numel() / depth, blocks = columns / kTileColumns;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = columns;
  at::Tensor out = at::empty(shape, x.options());
  const bf16* a = x.data_ptr<bf16>();
  const bf16* b = tiles.data_ptr<bf16>();
  bf16* o = out.data_ptr<bf16>();
#pragma omp parallel num_threads(at::get_num_threads())
  {
    thread_local std::vector<float> acc;
    if (int64_t(acc.size()) < rows * kTileColumns) acc.resize(rows * kTileColumns);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      at::native::cpublas::brgemm(rows, kTileColumns, depth, depth, kTileColumns, kTileColumns,
                                  false, a, b + blk * kTileColumns * depth, acc.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < kTileColumns; j += 16)
          _mm256_storeu_si256(
              reinterpret_cast<__m256i*>(o + r * columns + blk * kTileColumns + j),
              (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(acc.data() + r * kTileColumns + j)));
    }
    at::native::cpublas::brgemm_release();
  }
  return out;
}
#endif

}  // namespace

void remember(int64_t key, at::Tensor packed) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  table().copies[key] = std::move(packed);
}

// `tiles` [N/32 * K/2 * 32 * 2]: each 32-column block of the weight in the pair layout.
void remember_tiles(int64_t key, at::Tensor tiles) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  table().tiles[key] = std::move(tiles);
}

// Drops the entry (and its tile copy) only if it still holds `packed`: the address may have
// been re-registered.
void forget(int64_t key, const at::Tensor& packed) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  auto it = table().copies.find(key);
  if (it != table().copies.end() && it->second.is_same(packed)) {
    table().copies.erase(it);
    table().tiles.erase(key);
  }
}

void forget_any(int64_t key) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  table().copies.erase(key);
  table().tiles.erase(key);
}

void set_row_cap(int64_t rows) { table().row_cap.store(rows); }

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight) {
  const at::Tensor xc = x.contiguous();
  const int64_t key = reinterpret_cast<int64_t>(weight.data_ptr());
  const int64_t rows = xc.dim() >= 1 && xc.size(-1) > 0 ? xc.numel() / xc.size(-1) : 0;
  at::Tensor packed, tiles;
  {
    std::shared_lock<std::shared_mutex> guard(table().lock);
    auto it = table().copies.find(key);
    if (it != table().copies.end()) packed = it->second;
    if (tile_path_serves(xc, weight, rows)) {
      auto t = table().tiles.find(key);
      if (t != table().tiles.end()) tiles = t->second;
    }
  }
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  if (tiles.defined() && tiles.numel() == weight.numel() && xc.size(-1) == weight.size(1))
    return tile_linear(xc, tiles, weight.size(0));
#endif
  if (!packed.defined() || xc.scalar_type() != weight.scalar_type() || xc.dim() < 1 ||
      xc.size(0) > table().row_cap.load(std::memory_order_relaxed) ||
      packed.sizes() != weight.sizes())
    return at::linear(xc, weight);
  return packed_mm(xc, packed);
}

TORCH_LIBRARY_FRAGMENT(inferplane, m) {
  m.def("store_kv(Tensor key, Tensor value, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor slot_mapping) -> ()");
  m.def("packed_linear(Tensor x, Tensor weight) -> Tensor");
}

// Any device: store_kv is plain ATen, and a weight without a packed copy takes at::linear.
TORCH_LIBRARY_IMPL(inferplane, CompositeExplicitAutograd, m) {
  m.impl("store_kv", &store_kv);
  m.impl("packed_linear", &packed_linear);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("remember", &remember);
  m.def("remember_tiles", &remember_tiles);
  m.def("tiles_ready", &tiles_ready);
  m.def("forget", &forget);
  m.def("forget_any", &forget_any);
  m.def("set_row_cap", &set_row_cap);
}
