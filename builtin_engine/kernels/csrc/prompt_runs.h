// The prompt-attention kernels' shared argument checks: q [T, Hq, D] against caches
// [N, bs, Hk, D] and the runs (one table row, query start and context length each) as int32.
#pragma once
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
