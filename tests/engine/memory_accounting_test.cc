// Memory accounting: ModelRunner::memory() reports the backend buffers and graph storage that
// were actually allocated, and a KV cache that does not fit the backend's memory is refused
// before it is allocated.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <vector>

#include "engine/config.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/engine/model_test_util.h"

// Heap bytes live right now, by the size each `new` asked for (a header keeps the size).
namespace {
std::atomic<long> g_live_heap_bytes{0};
constexpr size_t kHeader = alignof(std::max_align_t);
}  // namespace

[[gnu::noinline]] void* operator new(std::size_t n) {
  char* p = static_cast<char*>(std::malloc(n + kHeader));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, &n, sizeof(n));
  g_live_heap_bytes.fetch_add(static_cast<long>(n), std::memory_order_relaxed);
  return p + kHeader;
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  std::size_t n = 0;
  std::memcpy(&n, base, sizeof(n));
  g_live_heap_bytes.fetch_sub(static_cast<long>(n), std::memory_order_relaxed);
  std::free(base);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

namespace mlaserve {
namespace {

// A CpuBackend that keeps a ledger of its live buffers and can pretend to have less memory.
class LedgerBackend : public CpuBackend {
 public:
  explicit LedgerBackend(uint64_t capacity = 0) : CpuBackend(2), capacity_(capacity) {}

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    const size_t rounded = (bytes + 64) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MaybePoison(p, rounded);
    Live()[p] = bytes;
    sizes_.push_back(bytes);
    return DeviceBuffer(p, bytes, &Free);
  }
  uint64_t memory_capacity() const override {
    return capacity_ > 0 ? capacity_ : CpuBackend::memory_capacity();
  }

  static uint64_t LiveBytes() {
    uint64_t total = 0;
    for (const auto& [p, bytes] : Live()) total += bytes;
    return total;
  }
  // Whether a buffer of exactly `bytes` was ever allocated.
  bool Allocated(uint64_t bytes) const {
    return std::find(sizes_.begin(), sizes_.end(), bytes) != sizes_.end();
  }

 private:
  static std::map<void*, size_t>& Live() {
    static std::map<void*, size_t> live;
    return live;
  }
  static void Free(void* p) {
    Live().erase(p);
    std::free(p);
  }

  uint64_t capacity_;
  std::vector<uint64_t> sizes_;
};

ModelOptions SmallOptions(int64_t num_kv_blocks) {
  ModelOptions options;
  options.max_num_tokens = 64;
  options.max_num_seqs = 4;
  options.max_model_len = 256;
  options.block_size = 16;
  options.num_kv_blocks = num_kv_blocks;
  options.context_chunk_tokens = 24;
  return options;
}

absl::StatusOr<std::unique_ptr<ModelRunner>> MakeRunner(Backend* backend, int64_t num_kv_blocks,
                                                        const std::vector<int32_t>& buckets) {
  auto model = LoadDeepseekModel(testing::ModelDir("v3_noaux"), backend,
                                 SmallOptions(num_kv_blocks));
  if (!model.ok()) return model.status();
  return ModelRunner::Create(std::move(*model), backend, buckets);
}

TEST(MemoryAccountingTest, ReportedBytesAreTheBuffersAllocated) {
  LedgerBackend backend;
  auto runner = MakeRunner(&backend, 40, {1, 2, 4});
  ASSERT_TRUE(runner.ok()) << runner.status();
  const MemoryUsage m = (*runner)->memory();
  // Every live backend buffer is a weight, a KV-cache layer or a workspace (the provisional
  // cache the graphs were measured over is gone).
  EXPECT_EQ(LedgerBackend::LiveBytes(), m.weight_bytes + m.kv_cache_bytes + m.workspace_bytes);
  const ModelConfig& c = (*runner)->model().config();
  EXPECT_EQ(m.kv_cache_bytes, static_cast<uint64_t>(c.num_hidden_layers * 40 * 16 *
                                                    c.kv_cache_dim() * sizeof(float)));
  EXPECT_GT(m.weight_bytes, 0u);
  EXPECT_GT(m.workspace_bytes, 0u);
  EXPECT_GT(m.graph_bytes, 0u);

  auto eager = MakeRunner(&backend, 40, {});
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_EQ((*eager)->memory().graph_bytes, 0u);
}

TEST(MemoryAccountingTest, GraphBytesAreTheHeapTheGraphHolds) {
  LedgerBackend backend;
  auto model = LoadDeepseekModel(testing::ModelDir("v3_noaux"), &backend, SmallOptions(8));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->AllocateKvCache(8).ok());
  auto builder = ForwardBatchBuilder::Create((*model)->forward_limits(), &backend);
  ASSERT_TRUE(builder.ok()) << builder.status();
  ForwardBatch batch;
  builder->Build({}, &batch, 4);
  (*model)->Forward(batch);  // warm-up: whatever a first step allocates for good

  const long before = g_live_heap_bytes.load();
  backend.BeginCapture();
  (*model)->Forward(batch);
  std::unique_ptr<Graph> graph = backend.EndCapture();
  EXPECT_EQ(static_cast<uint64_t>(g_live_heap_bytes.load() - before), graph->memory_bytes());
  EXPECT_GT(graph->memory_bytes(), 0u);
}

TEST(MemoryAccountingTest, KvCacheBeyondTheBackendsMemoryIsRefusedBeforeAllocation) {
  uint64_t fitting_total = 0;
  {
    LedgerBackend backend;
    auto runner = MakeRunner(&backend, 40, {1, 4});
    ASSERT_TRUE(runner.ok()) << runner.status();
    fitting_total = (*runner)->memory().total();
  }
  {
    LedgerBackend exact(fitting_total);
    EXPECT_TRUE(MakeRunner(&exact, 40, {1, 4}).ok());
  }
  LedgerBackend small(fitting_total);
  auto runner = MakeRunner(&small, 41, {1, 4});
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(runner.status().message().find("KV cache of 40 blocks"), absl::string_view::npos)
      << runner.status();
  // No layer of the refused cache was ever allocated.
  const ModelConfig config = *LoadModelConfig(testing::ModelDir("v3_noaux"));
  EXPECT_FALSE(small.Allocated(41 * 16 * config.kv_cache_dim() * sizeof(float)));
  EXPECT_TRUE(small.Allocated(2 * 16 * config.kv_cache_dim() * sizeof(float)));
}

}  // namespace
}  // namespace mlaserve
