// The compiled step's two glue ops in C++ (kernels/step_ops.py says why), registered with
// torch's dispatcher so that a graph's call reaches ATen without entering Python:
//   inferplane::store_kv(key, value, k_cache!, v_cache!, slot_mapping)  K/V rows into the cache
//   inferplane::packed_linear(x, weight)   x @ weight.T on weight's oneDNN packed copy, if any
// The packed copies are those kernels/packed_linear.py made; it mirrors its table here
// (remember / forget / set_row_cap) so the op finds them by the dense weight's address.
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

void store_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
              const at::Tensor& v_cache, const at::Tensor& slot_mapping) {
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.dim() == 4, "caches [blocks, block_size, Hk, D]");
  const int64_t heads = k_cache.size(2), dim = k_cache.size(3);
  k_cache.view({-1, heads, dim}).index_copy_(0, slot_mapping, key.to(k_cache.scalar_type()));
  v_cache.view({-1, heads, dim}).index_copy_(0, slot_mapping, value.to(v_cache.scalar_type()));
}

namespace {

struct PackedTable {
  std::shared_mutex lock;  // written at load and when a weight is freed, read every call
  std::unordered_map<int64_t, at::Tensor> copies;  // dense weight address -> packed copy
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

}  // namespace

void remember(int64_t key, at::Tensor packed) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  table().copies[key] = std::move(packed);
}

// Drops the entry only if it still holds `packed`: the address may have been re-registered.
void forget(int64_t key, const at::Tensor& packed) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  auto it = table().copies.find(key);
  if (it != table().copies.end() && it->second.is_same(packed)) table().copies.erase(it);
}

void forget_any(int64_t key) {
  std::unique_lock<std::shared_mutex> guard(table().lock);
  table().copies.erase(key);
}

void set_row_cap(int64_t rows) { table().row_cap.store(rows); }

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight) {
  const at::Tensor xc = x.contiguous();
  at::Tensor packed;
  {
    std::shared_lock<std::shared_mutex> guard(table().lock);
    auto it = table().copies.find(reinterpret_cast<int64_t>(weight.data_ptr()));
    if (it != table().copies.end()) packed = it->second;
  }
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
  m.def("forget", &forget);
  m.def("forget_any", &forget_any);
  m.def("set_row_cap", &set_row_cap);
}
