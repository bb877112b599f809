// The oracle's MoE ops: router hand examples for every method and scaling rule, alignment
// invariants, and routed experts against a direct per-token loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ref/ref_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve {
namespace {

using test::ExpectClose;
using test::FloatTensor;
using test::IntTensor;
using test::RandomPermutation;
using test::RandomTensor;
using test::TestTensor;

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Router settings with the given top_k and every other field at its default.
MoeRouteParams TopK(int top_k) {
  MoeRouteParams p;
  p.top_k = top_k;
  return p;
}

class RefMoeTest : public ::testing::Test {
 protected:
  struct Routed {
    std::vector<int32_t> ids;
    std::vector<float> weights;
  };

  // Routes one token per logits row; `p` supplies everything but the tensors.
  Routed Route(const std::vector<float>& logits, int num_experts, MoeRouteParams p,
               const std::vector<float>& bias = {}) {
    const int64_t tokens = static_cast<int64_t>(logits.size()) / num_experts;
    TestTensor logits_t = FloatTensor(b(), DType::kF32, {tokens, num_experts}, logits);
    TestTensor bias_t(b(), DType::kF32, {num_experts});
    if (!bias.empty()) bias_t.Write(bias);
    TestTensor ids(b(), DType::kI32, {tokens, p.top_k});
    TestTensor weights(b(), DType::kF32, {tokens, p.top_k});
    p.logits = logits_t.view();
    p.correction_bias = bias.empty() ? TensorView() : bias_t.view();
    p.topk_ids = ids.view();
    p.topk_weights = weights.view();
    b().MoeRoute(p);
    return {ids.ReadInts(), weights.Read()};
  }

  std::unique_ptr<Backend> backend_ = MakeRefBackend();
  Backend& b() { return *backend_; }
};

TEST_F(RefMoeTest, GreedySoftmaxOrdersByScoreAndBreaksTiesToLowerId) {
  const std::vector<float> logits = {0, 1, 2, 3, /* tie */ 1, 2, 2, 0};
  const Routed r = Route(logits, 4, TopK(2));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 2, 1, 2}));
  const double z0 = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double z1 = 1 + std::exp(1.0) + 2 * std::exp(2.0);
  ExpectClose(r.weights,
              std::vector<float>{
                  static_cast<float>(std::exp(3.0) / z0), static_cast<float>(std::exp(2.0) / z0),
                  static_cast<float>(std::exp(2.0) / z1), static_cast<float>(std::exp(2.0) / z1)},
              0, 1e-6, "weights");
}

// DeepSeek-V2 scales only unnormalised weights; V3 (scale_always) scales after normalising.
TEST_F(RefMoeTest, ScalingRules) {
  const std::vector<float> logits = {0, 1, 2, 3};
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double p3 = std::exp(3.0) / z, p2 = std::exp(2.0) / z;
  const float factor = 2.5f;
  auto weights = [&](int top_k, bool norm, bool always) {
    MoeRouteParams p = TopK(top_k);
    p.norm_topk_prob = norm;
    p.scale_always = always;
    p.routed_scaling_factor = factor;
    return Route(logits, 4, p).weights;
  };
  ExpectClose(weights(2, false, false),
              std::vector<float>{static_cast<float>(p3 * factor), static_cast<float>(p2 * factor)},
              0, 1e-6, "v2 unnormalised: scaled");
  ExpectClose(
      weights(2, true, false),
      std::vector<float>{static_cast<float>(p3 / (p3 + p2)), static_cast<float>(p2 / (p3 + p2))}, 0,
      1e-6, "v2 normalised: not scaled");
  ExpectClose(weights(1, true, false), std::vector<float>{static_cast<float>(p3 * factor)}, 0, 1e-6,
              "top_k 1 is never normalised");
  ExpectClose(weights(2, true, true),
              std::vector<float>{static_cast<float>(factor * p3 / (p3 + p2)),
                                 static_cast<float>(factor * p2 / (p3 + p2))},
              0, 1e-6, "v3: normalised then scaled");
}

// 8 experts in 4 groups of 2. Group maxima 10, 9, 8.95, 0 keep groups 0 and 1, so expert 3
// (8.9) beats expert 4 (8.95), which plain greedy would pick.
TEST_F(RefMoeTest, GroupLimitedGreedyMasksGroups) {
  const std::vector<float> logits = {10, 0, 9, 8.9f, 8.95f, 0, 0, 0};
  EXPECT_EQ(Route(logits, 8, TopK(3)).ids, (std::vector<int32_t>{0, 2, 4}));
  MoeRouteParams grouped = TopK(3);
  grouped.method = MoeTopkMethod::kGroupLimitedGreedy;
  grouped.n_group = 4;
  grouped.topk_group = 2;
  const Routed r = Route(logits, 8, grouped);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 3}));
  double z = 0;
  for (float l : logits) z += std::exp(l - 10.0);
  EXPECT_NEAR(r.weights[2], std::exp(8.9f - 10.0) / z, 1e-7);
}

// noaux_tc: choice = sigmoid + bias; a group ranks by the sum of its two best choices, so group
// 0 (0.9 + 0.1) loses to groups 1 (0.6 + 0.6) and 2 (0.7 + 0.45) although it holds the best
// expert. Experts 2 and 3 tie exactly; the lower id wins. Weights use sigmoid without bias.
TEST_F(RefMoeTest, NoauxTcRanksGroupsByTopTwoSumAndWeighsWithoutBias) {
  const std::vector<float> logits = {3, -2, 0.5f, 0.5f, 0, -1, -3, -3};
  const std::vector<double> target = {0.9, 0.1, 0.6, 0.6, 0.7, 0.45, 0.2, 0.2};
  std::vector<float> bias(8);
  for (int e = 0; e < 8; ++e) bias[e] = static_cast<float>(target[e] - Sigmoid(logits[e]));
  MoeRouteParams p = TopK(2);
  p.scoring = MoeScoring::kSigmoid;
  p.method = MoeTopkMethod::kNoauxTc;
  p.n_group = 4;
  p.topk_group = 2;
  p.norm_topk_prob = true;
  p.scale_always = true;
  p.routed_scaling_factor = 2.5f;
  const Routed r = Route(logits, 8, p, bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 2}));
  const double s4 = Sigmoid(0), s2 = Sigmoid(0.5);
  ExpectClose(r.weights,
              std::vector<float>{static_cast<float>(2.5 * s4 / (s4 + s2)),
                                 static_cast<float>(2.5 * s2 / (s4 + s2))},
              0, 1e-6, "weights");
}

struct Aligned {
  std::vector<int32_t> sorted_ids, block_expert_ids, expert_offsets;
  int32_t num_post_pad = 0;
};

Aligned Align(Backend& b, const std::vector<int32_t>& topk_ids, int64_t top_k, int num_experts,
              int block_size) {
  const int64_t pairs = static_cast<int64_t>(topk_ids.size());
  const int64_t len = pairs + num_experts * (block_size - 1);
  TestTensor ids = IntTensor(b, {pairs / top_k, top_k}, topk_ids);
  TestTensor sorted(b, DType::kI32, {len});
  TestTensor blocks(b, DType::kI32, {(len + block_size - 1) / block_size});
  TestTensor offsets(b, DType::kI32, {num_experts + 1});
  TestTensor post_pad(b, DType::kI32, {1});
  b.MoeAlignBlockSize({.topk_ids = ids.view(),
                       .num_experts = num_experts,
                       .block_size = block_size,
                       .sorted_ids = sorted.view(),
                       .block_expert_ids = blocks.view(),
                       .expert_offsets = offsets.view(),
                       .num_tokens_post_pad = post_pad.view()});
  Aligned a{sorted.ReadInts(), blocks.ReadInts(), offsets.ReadInts(), post_pad.ReadInts()[0]};
  a.sorted_ids.resize(a.num_post_pad);
  a.block_expert_ids.resize(a.num_post_pad / block_size);
  return a;
}

TEST_F(RefMoeTest, AlignHandExample) {
  // Pairs 0..3 go to experts 1, 0, 1, 2; expert 3 gets none. Sentinel = 4.
  const Aligned a = Align(b(), {1, 0, 1, 2}, 2, 4, 2);
  EXPECT_EQ(a.expert_offsets, (std::vector<int32_t>{0, 2, 4, 6, 6}));
  EXPECT_EQ(a.num_post_pad, 6);
  EXPECT_EQ(a.sorted_ids, (std::vector<int32_t>{1, 4, 0, 2, 3, 4}));
  EXPECT_EQ(a.block_expert_ids, (std::vector<int32_t>{0, 1, 2}));
}

TEST_F(RefMoeTest, AlignInvariantsOnRandomRouting) {
  std::mt19937 rng(21);
  const int64_t tokens = 37, top_k = 3;
  const int experts = 9, block = 4;
  // Distinct experts per token, never expert 5, so one run is empty.
  std::vector<int32_t> topk_ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> perm = RandomPermutation(rng, experts);
    perm.erase(std::find(perm.begin(), perm.end(), 5));
    topk_ids.insert(topk_ids.end(), perm.begin(), perm.begin() + top_k);
  }
  const Aligned a = Align(b(), topk_ids, top_k, experts, block);
  const int32_t sentinel = static_cast<int32_t>(tokens * top_k);
  ASSERT_EQ(a.expert_offsets.front(), 0);
  EXPECT_EQ(a.expert_offsets.back(), a.num_post_pad);
  std::vector<int> seen(tokens * top_k, 0);
  for (int e = 0; e < experts; ++e) {
    std::vector<int32_t> mine;
    for (int32_t pair = 0; pair < sentinel; ++pair) {
      if (topk_ids[pair] == e) mine.push_back(pair);
    }
    const int32_t begin = a.expert_offsets[e], end = a.expert_offsets[e + 1];
    const int32_t padded = (static_cast<int32_t>(mine.size()) + block - 1) / block * block;
    ASSERT_EQ(end - begin, padded) << "expert " << e;
    for (int32_t r = begin; r < end; ++r) {
      const int32_t i = r - begin;
      EXPECT_EQ(a.sorted_ids[r], i < static_cast<int32_t>(mine.size()) ? mine[i] : sentinel);
      if (a.sorted_ids[r] != sentinel) ++seen[a.sorted_ids[r]];
      EXPECT_EQ(a.block_expert_ids[r / block], e);
    }
  }
  EXPECT_EQ(a.expert_offsets[6] - a.expert_offsets[5], 0);
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

// Routed experts with bf16 weights against out[t] = Σ_k w[t,k] · E_e(x[t]) computed per token.
TEST_F(RefMoeTest, ExpertsMatchDirectPerTokenLoop) {
  std::mt19937 rng(22);
  const int64_t tokens = 11, hidden = 12, inter = 5, top_k = 2;
  const int experts = 6, block = 4;
  const int64_t len = tokens * top_k + experts * (block - 1);
  TestTensor x = RandomTensor(b(), rng, DType::kF32, {tokens, hidden});
  TestTensor w13 = RandomTensor(b(), rng, DType::kBF16, {experts, 2 * inter, hidden});
  TestTensor w2 = RandomTensor(b(), rng, DType::kBF16, {experts, hidden, inter});
  TestTensor weights = RandomTensor(b(), rng, DType::kF32, {tokens, top_k}, 0, 1);
  std::vector<int32_t> topk_ids;
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int32_t> perm = RandomPermutation(rng, experts);
    topk_ids.insert(topk_ids.end(), perm.begin(), perm.begin() + top_k);
  }
  TestTensor ids = IntTensor(b(), {tokens, top_k}, topk_ids);
  TestTensor sorted(b(), DType::kI32, {len});
  TestTensor blocks(b(), DType::kI32, {(len + block - 1) / block});
  TestTensor offsets(b(), DType::kI32, {experts + 1});
  TestTensor post_pad(b(), DType::kI32, {1});
  b().MoeAlignBlockSize({.topk_ids = ids.view(),
                         .num_experts = experts,
                         .block_size = block,
                         .sorted_ids = sorted.view(),
                         .block_expert_ids = blocks.view(),
                         .expert_offsets = offsets.view(),
                         .num_tokens_post_pad = post_pad.view()});
  TestTensor ws_gate_up(b(), DType::kF32, {len, 2 * inter});
  TestTensor ws_act(b(), DType::kF32, {len, inter});
  TestTensor ws_down(b(), DType::kF32, {len, hidden});
  TestTensor out(b(), DType::kF32, {tokens, hidden});
  b().MoeExperts({.x = x.view(),
                  .w13 = w13.view(),
                  .w2 = w2.view(),
                  .topk_weights = weights.view(),
                  .sorted_ids = sorted.view(),
                  .block_expert_ids = blocks.view(),
                  .expert_offsets = offsets.view(),
                  .num_tokens_post_pad = post_pad.view(),
                  .block_size = block,
                  .workspace_gate_up = ws_gate_up.view(),
                  .workspace_act = ws_act.view(),
                  .workspace_down = ws_down.view(),
                  .out = out.view()});

  const std::vector<float> xs = x.Read(), g = w13.Read(), d = w2.Read(), ws = weights.Read();
  std::vector<float> expected(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t e = topk_ids[t * top_k + k];
      std::vector<double> act(inter);
      for (int64_t i = 0; i < inter; ++i) {
        double gate = 0, up = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          gate += static_cast<double>(g[(e * 2 * inter + i) * hidden + c]) * xs[t * hidden + c];
          up +=
              static_cast<double>(g[(e * 2 * inter + inter + i) * hidden + c]) * xs[t * hidden + c];
        }
        act[i] = gate * Sigmoid(gate) * up;
      }
      for (int64_t c = 0; c < hidden; ++c) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += d[(e * hidden + c) * inter + i] * act[i];
        expected[t * hidden + c] += static_cast<float>(ws[t * top_k + k] * y);
      }
    }
  }
  ExpectClose(out.Read(), expected, 1e-5, 1e-5, "moe", out.shape());
}

}  // namespace
}  // namespace mlaserve
