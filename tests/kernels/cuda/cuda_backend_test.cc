// CudaBackend beyond per-op parity: graph capture and replay against eager execution, misuse
// during capture, sticky errors naming the op, and the backend's fixed properties.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaBackendTest = CudaVsRefTest;

TEST_F(CudaBackendTest, Properties) {
  EXPECT_EQ(cuda().name(), "cuda");
  EXPECT_FALSE(cuda().batch_invariant());
  EXPECT_TRUE(cuda_invariant().batch_invariant());
  EXPECT_EQ(cuda().activation_dtype(), DType::kF32);
  EXPECT_EQ(cuda_bf16().activation_dtype(), DType::kBF16);
  EXPECT_GT(cuda().memory_capacity(), uint64_t{0});
  TestTensor t(cuda(), DType::kF32, {4});
  EXPECT_EQ(cuda().HostAddress(t.view()), nullptr);
}

TEST_F(CudaBackendTest, FreshAllocationsArePoisoned) {
  TestTensor t(cuda(), DType::kI32, {37});
  for (int32_t v : t.ReadInts()) EXPECT_EQ(v, -1);
}

// One decode-like step (weights and k_pe drawn from `rng`, so equal seeds give equal steps): embedding of per-step ids, RMSNorm, GEMM, SiLU·mul, residual add and a
// KV cache write at per-step slots, all reading their per-step values from device buffers.
struct Step {
  Step(Backend& b, std::mt19937& rng)
      : table(RandomTensor(b, rng, DType::kBF16, {kVocab, kHidden})),
        norm_w(RandomTensor(b, rng, DType::kBF16, {kHidden})),
        w13(RandomTensor(b, rng, DType::kBF16, {2 * kInter, kHidden})),
        ids(b, DType::kI32, {kTokens}),
        slots(b, DType::kI32, {kTokens}),
        h(b, DType::kF32, {kTokens, kHidden}),
        gate_up(b, DType::kF32, {kTokens, 2 * kInter}),
        act(b, DType::kF32, {kTokens, kInter}),
        cache(b, DType::kF32, {4, 4, kInter + kRope}),
        k_pe(RandomTensor(b, rng, DType::kF32, {kTokens, kRope})) {}

  void Run(Backend& b) {
    b.Embedding({.ids = ids.view(), .table = table.view(), .out = h.view()});
    b.RmsNorm({.x = h.view(), .residual = TensorView(), .weight = norm_w.view(), .eps = 1e-6f, .out = h.view()});
    b.Gemm({.a = h.view(), .b = w13.view(), .out = gate_up.view()});
    b.SiluMul({.x = gate_up.view(), .out = act.view()});
    b.Add({.a = act.view(), .b = act.view(), .out = act.view()});
    b.WriteKvCache({.latent = act.view(), .k_pe = k_pe.view(), .slot_mapping = slots.view(),
                    .kv_cache = cache.view()});
  }

  static constexpr int64_t kVocab = 50, kHidden = 72, kInter = 40, kRope = 8, kTokens = 5;
  TestTensor table, norm_w, w13, ids, slots, h, gate_up, act, cache, k_pe;
};

TEST_F(CudaBackendTest, ReplayMatchesEagerWithNewInputs) {
  std::mt19937 rng(31), oracle_rng(31);
  Step step(cuda(), rng);
  Step oracle(ref(), oracle_rng);
  step.ids.WriteInts(RandomInts(rng, Step::kTokens, 0, Step::kVocab - 1));
  step.slots.WriteInts(std::vector<int32_t>(Step::kTokens, -1));
  cuda().BeginCapture();
  step.Run(cuda());
  std::unique_ptr<Graph> graph = cuda().EndCapture();
  ASSERT_NE(graph, nullptr);
  ASSERT_TRUE(cuda().Synchronize().ok());
  for (int iteration = 0; iteration < 3; ++iteration) {
    const std::vector<int32_t> ids = RandomInts(rng, Step::kTokens, 0, Step::kVocab - 1);
    std::vector<int32_t> slots = RandomPermutation(rng, 16);
    slots.resize(Step::kTokens);
    slots[iteration] = -1;
    step.ids.WriteInts(ids);
    step.slots.WriteInts(slots);
    step.cache.Write(std::vector<float>(step.cache.numel(), 0.0f));
    graph->Replay({});
    const std::vector<float> replayed_act = step.act.Read(), replayed_cache = step.cache.Read();
    step.cache.Write(std::vector<float>(step.cache.numel(), 0.0f));
    step.Run(cuda());
    EXPECT_EQ(replayed_act, step.act.Read()) << "iteration " << iteration;
    EXPECT_EQ(replayed_cache, step.cache.Read()) << "iteration " << iteration;

    // The same step on the oracle.
    oracle.ids.WriteInts(ids);
    oracle.slots.WriteInts(slots);
    oracle.cache.Write(std::vector<float>(oracle.cache.numel(), 0.0f));
    oracle.Run(ref());
    ExpectClose(replayed_act, oracle.act.Read(), 1e-4, 1e-4, "act", oracle.act.shape());
    ExpectClose(replayed_cache, oracle.cache.Read(), 1e-4, 1e-4, "cache", oracle.cache.shape());
  }
}

TEST_F(CudaBackendTest, MisuseDuringCaptureIsReported) {
  TestTensor t(cuda(), DType::kF32, {8});
  std::vector<float> host(8);
  cuda().BeginCapture();
  EXPECT_FALSE(cuda().Allocate(64).ok());
  cuda().CopyToHost(t.view(), host.data(), 32);
  const absl::Status during = cuda().Synchronize();
  std::unique_ptr<Graph> graph = cuda().EndCapture();
  EXPECT_FALSE(during.ok());
  EXPECT_NE(std::string(during.message()).find("Allocate during graph capture"),
            std::string::npos)
      << during;
  // The error was reported once; the backend works again.
  EXPECT_TRUE(cuda().Synchronize().ok());
  t.Write(std::vector<float>(8, 2.0f));
  EXPECT_EQ(t.Read(), std::vector<float>(8, 2.0f));
}

// MergeAttn either matches the oracle or, while the attention kernels are not in the build,
// reports an error naming the op.
TEST_F(CudaBackendTest, MergeAttnRunsOrSaysItIsNotImplemented) {
  std::mt19937 rng(32);
  const int64_t tokens = 3, heads = 2, dim = 8;
  TestTensor out = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, dim});
  TestTensor lse = RandomTensor(ref(), rng, DType::kF32, {tokens, heads});
  TestTensor suffix_out = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, dim});
  TestTensor suffix_lse = RandomTensor(ref(), rng, DType::kF32, {tokens, heads});
  TestTensor out_gpu = out.CloneTo(cuda()), lse_gpu = lse.CloneTo(cuda());
  TestTensor suffix_out_gpu = suffix_out.CloneTo(cuda()), suffix_lse_gpu = suffix_lse.CloneTo(cuda());
  ref().MergeAttn({.out = out.view(), .lse = lse.view(), .suffix_out = suffix_out.view(),
                   .suffix_lse = suffix_lse.view()});
  cuda().MergeAttn({.out = out_gpu.view(), .lse = lse_gpu.view(),
                    .suffix_out = suffix_out_gpu.view(), .suffix_lse = suffix_lse_gpu.view()});
  ASSERT_TRUE(cuda().Synchronize().ok());
  ExpectClose(out_gpu.Read(), out.Read(), 1e-5, 1e-5, "out");
  ExpectClose(lse_gpu.Read(), lse.Read(), 1e-5, 1e-5, "lse");
}

}  // namespace
}  // namespace mlaserve::test
