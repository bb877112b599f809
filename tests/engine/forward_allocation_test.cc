// The buffer rule: after warm-up, a forward step on the production CPU backend allocates
// nothing on the heap (every workspace and metadata buffer was allocated at start-up).
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <vector>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/engine/model_test_util.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// The replacement operator new allocates with malloc, so its operator delete frees with free;
// gcc cannot see that the pair matches once both are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mlaserve {
namespace {

std::unique_ptr<ModelRunner> MakeRunner(Backend* backend, const std::vector<int32_t>& buckets) {
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_seqs = 4;
  options.max_model_len = 256;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.context_chunk_tokens = 24;
  auto model = LoadDeepseekModel(testing::ModelDir("v3_noaux"), backend, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto runner = ModelRunner::Create(std::move(*model), backend, buckets);
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? std::move(*runner) : nullptr;
}

long AllocationsPerThreeSteps(ModelRunner& runner, const std::vector<StepSequence>& step) {
  StepLogits logits;
  EXPECT_TRUE(runner.Execute(step, &logits).ok());  // warm-up
  const long before = g_allocations.load();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(runner.Execute(step, &logits).ok());
  return g_allocations.load() - before;
}

// Token ids and a block table shared by the steps below (the cache content does not matter).
struct TwoSequences {
  TwoSequences() : tokens(100), table(7) {
    std::iota(tokens.begin(), tokens.end(), 3);
    std::iota(table.begin(), table.end(), 1);
  }
  StepSequence Step(int32_t start, int32_t n) const {
    return {.token_ids = tokens, .start_position = start, .num_new_tokens = n,
            .block_table = table, .needs_logits = true};
  }
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
};

TEST(ForwardAllocationTest, WarmedUpEagerStepsAllocateNothing) {
  auto backend = MakeCpuBackend(2);
  auto runner = MakeRunner(backend.get(), {});
  ASSERT_NE(runner, nullptr);
  // A mixed step: one decode over 60 cached tokens and one prefill chunk over 40 cached ones
  // (context rounds), both needing logits.
  const TwoSequences seqs;
  const std::vector<StepSequence> step = {seqs.Step(60, 1), seqs.Step(40, 30)};
  EXPECT_EQ(AllocationsPerThreeSteps(*runner, step), 0);
  EXPECT_EQ(runner->eager_steps().mixed, 4u);
}

TEST(ForwardAllocationTest, GraphReplaysAllocateNothing) {
  auto backend = MakeCpuBackend(2);
  auto runner = MakeRunner(backend.get(), {4});
  ASSERT_NE(runner, nullptr);
  const TwoSequences seqs;
  const std::vector<StepSequence> step = {seqs.Step(60, 1), seqs.Step(90, 1)};
  EXPECT_EQ(AllocationsPerThreeSteps(*runner, step), 0);
  EXPECT_EQ(runner->graph_replays().at(4), 4u);
}

}  // namespace
}  // namespace mlaserve
