// The buffer rule: after warm-up, a forward step on the production CPU backend allocates
// nothing on the heap (every workspace and metadata buffer was allocated at start-up).
#include <atomic>
#include <cstdlib>
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

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mlaserve {
namespace {

TEST(ForwardAllocationTest, WarmedUpStepsAllocateNothing) {
  auto backend = MakeCpuBackend(2);
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_seqs = 4;
  options.max_model_len = 256;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.context_chunk_tokens = 24;
  auto model = LoadDeepseekModel(testing::ModelDir("v3_noaux"), backend.get(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  auto runner = ModelRunner::Create(std::move(*model), backend.get());
  ASSERT_TRUE(runner.ok()) << runner.status();

  std::vector<int32_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::vector<int32_t> table(7);
  std::iota(table.begin(), table.end(), 1);
  // A mixed step: one decode over 60 cached tokens and one prefill chunk over 40 cached ones
  // (context rounds), both needing logits.
  const std::vector<StepSequence> step = {
      {.token_ids = tokens, .start_position = 60, .num_new_tokens = 1, .block_table = table,
       .needs_logits = true},
      {.token_ids = tokens, .start_position = 40, .num_new_tokens = 30, .block_table = table,
       .needs_logits = true}};
  StepLogits logits;
  ASSERT_TRUE((*runner)->Execute(step, &logits).ok());  // warm-up
  const long before = g_allocations.load();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*runner)->Execute(step, &logits).ok());
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace mlaserve
