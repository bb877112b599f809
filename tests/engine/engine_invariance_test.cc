// What a request generates must not depend on how the engine happened to run it: alone or in a
// batch, cold or from the prefix cache, in one prefill or in chunks.
//
// Batch invariance is checked bit for bit (tokens and logprobs) on the ref and CPU backends and,
// where the CUDA Toolkit exists, on the CUDA backend in the SIMT simulator and, in
// engine_invariance_test_gpu, on a device (its split-KV decode plans each sequence by its own
// length there; kernels/mla_split_plan.h). Prefills over
// cached context (prefix-cache hits, later chunks of a chunked prefill) attend over that context
// in rounds merged by log-sum-exp, which rounds differently from a single causal pass, so those
// comparisons require identical tokens and logprobs equal to within float rounding.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ref/ref_backend.h"
#include "tests/engine/cuda_test_backend.h"
#include "tests/engine/engine_test_util.h"

namespace mlaserve {
namespace {

using testing::Collect;
using testing::GreedyRequest;
using testing::NewTestEngine;
using testing::RandomPrompt;
using testing::StreamResult;
using testing::TestEngineOptions;

StreamResult RunToEnd(Engine& engine, Request request) {
  auto stream = engine.Submit(std::move(request));
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? Collect(**stream) : StreamResult{};
}

std::string Format(const std::vector<std::pair<int32_t, float>>& top) {
  std::string out;
  for (const auto& [id, logprob] : top) out += absl::StrFormat("(%d, %.9g) ", id, logprob);
  return out;
}

// Same ids, and the same logprobs and top logprobs bit for bit.
void ExpectSameOutput(const StreamResult& a, const StreamResult& b, const std::string& what) {
  ASSERT_EQ(a.token_ids, b.token_ids) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    // The first difference is the informative one; later tokens inherit it.
    if (a.logprobs[i].logprob != b.logprobs[i].logprob || a.logprobs[i].top != b.logprobs[i].top) {
      ADD_FAILURE() << what << ": logprobs differ first at token " << i << ": "
                    << Format(a.logprobs[i].top) << " vs " << Format(b.logprobs[i].top);
      return;
    }
  }
}

// Same ids; logprobs (and top ids) equal up to float rounding.
void ExpectSameTokens(const StreamResult& a, const StreamResult& b, const std::string& what) {
  ASSERT_EQ(a.token_ids, b.token_ids) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_NEAR(a.logprobs[i].logprob, b.logprobs[i].logprob, 1e-5) << what << " token " << i;
    ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size());
    for (size_t j = 0; j < a.logprobs[i].top.size(); ++j) {
      EXPECT_NEAR(a.logprobs[i].top[j].second, b.logprobs[i].top[j].second, 1e-5) << what;
    }
  }
}

Request SeededRequest(std::vector<int32_t> prompt, int32_t max_tokens, uint64_t seed) {
  Request request = GreedyRequest(std::move(prompt), max_tokens);
  request.sampling.temperature = 0.9f;
  request.sampling.top_p = 0.95f;
  request.sampling.seed = seed;
  return request;
}

enum class BackendKind { kRef, kCpu, kCuda };
constexpr const char* kBackendNames[] = {"Ref", "Cpu", "Cuda"};  // by BackendKind

std::unique_ptr<Backend> NewBackend(BackendKind kind) {
  if (kind == BackendKind::kRef) return MakeRefBackend();
  if (kind == BackendKind::kCpu) return MakeCpuBackend(2, /*batch_invariant=*/true);
  return testing::NewCudaTestBackend(/*batch_invariant=*/true);
}

std::unique_ptr<Engine> BatchEngine(BackendKind kind) {
  // The token budget holds every prompt whole and the cache every sequence at full length, so
  // nothing is chunked or preempted (both are covered separately below).
  return NewTestEngine({.max_num_seqs = 40,
                        .max_num_batched_tokens = 4096,
                        .num_kv_blocks = 1 + 40 * (256 / 16),
                        .backend = NewBackend(kind)});
}

// Runs `probe` once alone and once among 32 other requests of assorted lengths, prefilling and
// decoding around it: some start before it, so its prefill shares steps with their decodes, and
// more arrive while it decodes, so its decodes share steps with their prefills (steps of many
// rows, where kernels pick other code paths than for the few rows of a lone decode).
void CheckBatchInvariance(BackendKind kind, Request probe, const std::string& what) {
  if (kind == BackendKind::kCuda && !testing::kCudaBuilt) {
    GTEST_SKIP() << "built without the CUDA Toolkit";
  }
  auto engine = BatchEngine(kind);
  ASSERT_NE(engine, nullptr);
  const StreamResult alone = RunToEnd(*engine, probe);
  // A fresh engine, so that the probe's prompt is not in the prefix cache either time.
  engine = BatchEngine(kind);
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<RequestStream>> others;
  const auto submit_other = [&](int i, int32_t prompt_len, int32_t max_tokens) {
    auto stream = engine->Submit(GreedyRequest(RandomPrompt(100 + i, prompt_len), max_tokens));
    ASSERT_TRUE(stream.ok());
    others.push_back(*stream);
  };
  for (int i = 0; i < 24; ++i) submit_other(i, 7 + 4 * i, 40);
  while (engine->stats().steps_total < 2) absl::SleepFor(absl::Milliseconds(1));
  auto probe_stream = engine->Submit(probe);
  ASSERT_TRUE(probe_stream.ok());
  for (int i = 24; i < 32 && !(*probe_stream)->ended(); ++i) {
    const uint64_t step = engine->stats().steps_total;
    while (engine->stats().steps_total < step + 3 && !(*probe_stream)->ended()) {
      absl::SleepFor(absl::Microseconds(200));
    }
    submit_other(i, 40, 2);
  }
  const StreamResult batched = Collect(**probe_stream);
  for (auto& stream : others) Collect(*stream);
  ExpectSameOutput(alone, batched, what);
}

class BatchInvarianceTest : public ::testing::TestWithParam<BackendKind> {};

TEST_P(BatchInvarianceTest, GreedyOutputDoesNotDependOnTheBatch) {
  CheckBatchInvariance(GetParam(), GreedyRequest(RandomPrompt(1, 50), 30), "greedy");
}

TEST_P(BatchInvarianceTest, SeededOutputDoesNotDependOnTheBatch) {
  CheckBatchInvariance(GetParam(), SeededRequest(RandomPrompt(2, 33), 30, 1234), "seeded");
}

// Two CPU threads, so that the splits of work over the team are exercised as well.
std::vector<BackendKind> InvarianceBackends() {
  if (testing::kCudaOnly) return {BackendKind::kCuda};
  return {BackendKind::kRef, BackendKind::kCpu, BackendKind::kCuda};
}
INSTANTIATE_TEST_SUITE_P(Backends, BatchInvarianceTest, ::testing::ValuesIn(InvarianceBackends()),
                         [](const auto& info) {
                           return std::string(kBackendNames[static_cast<int>(info.param)]);
                         });

TEST(EngineInvarianceTest, SeedsReproduceAndDiffer) {
  auto engine = NewTestEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = RandomPrompt(3, 20);
  const StreamResult a = RunToEnd(*engine, SeededRequest(prompt, 40, 7));
  const StreamResult b = RunToEnd(*engine, SeededRequest(prompt, 40, 7));
  const StreamResult c = RunToEnd(*engine, SeededRequest(prompt, 40, 8));
  // The second and third runs find the prompt's first block in the prefix cache.
  ExpectSameTokens(a, b, "same seed");
  EXPECT_NE(a.token_ids, c.token_ids);
}

TEST(EngineInvarianceTest, PrefixCacheHitGivesTheColdOutput) {
  auto engine = NewTestEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = RandomPrompt(4, 80);
  const StreamResult cold = RunToEnd(*engine, GreedyRequest(prompt, 20));
  const StreamResult warm = RunToEnd(*engine, GreedyRequest(prompt, 20));
  EXPECT_EQ(cold.completion.cached_tokens, 0);
  // Whole blocks only, and never the last prompt token (its logits are needed).
  EXPECT_EQ(warm.completion.cached_tokens, 64);
  ExpectSameTokens(cold, warm, "prefix cache");
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 64u);
  EXPECT_GE(stats.prefix_cache_query_tokens, 64u);
}

TEST(EngineInvarianceTest, ChunkedPrefillGivesTheUnchunkedOutput) {
  const Request request = GreedyRequest(RandomPrompt(5, 90), 20);
  auto whole = NewTestEngine({.max_num_batched_tokens = 128});
  ASSERT_NE(whole, nullptr);
  const StreamResult unchunked = RunToEnd(*whole, request);
  auto chunked_engine = NewTestEngine({.max_num_batched_tokens = 16});
  ASSERT_NE(chunked_engine, nullptr);
  ExpectSameTokens(unchunked, RunToEnd(*chunked_engine, request), "chunked prefill");
}

}  // namespace
}  // namespace mlaserve
