#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

struct RouteCase {
  int experts, top_k;
  MoeScoring scoring;
  MoeTopkMethod method;
  int n_group, topk_group;
  bool norm, scale_always;
};

// The aligned order of random routing, computed by the oracle, on both backends.
struct Aligned {
  TestTensor sorted, blocks, offsets, post_pad;
};

Aligned Align(Backend& backend, const TestTensor& ids, int experts, int block, int64_t len) {
  Aligned a{TestTensor(backend, DType::kI32, {len}),
            TestTensor(backend, DType::kI32, {(len + block - 1) / block}),
            TestTensor(backend, DType::kI32, {experts + 1}), TestTensor(backend, DType::kI32, {1})};
  backend.MoeAlignBlockSize({.topk_ids = ids.view(),
                             .num_experts = experts,
                             .block_size = block,
                             .sorted_ids = a.sorted.view(),
                             .block_expert_ids = a.blocks.view(),
                             .expert_offsets = a.offsets.view(),
                             .num_tokens_post_pad = a.post_pad.view()});
  return a;
}

// Distinct experts per token, uniformly random.
std::vector<int32_t> RandomTopk(std::mt19937& rng, int64_t tokens, int experts, int top_k) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int32_t> perm = RandomPermutation(rng, experts);
    ids.insert(ids.end(), perm.begin(), perm.begin() + top_k);
  }
  return ids;
}

struct ExpertsCase {
  int experts, top_k;
  int64_t tokens, hidden, inter;
  int block;
};

// MoeExperts on `b` (its inputs already there) with fresh workspaces; the output, read back.
std::vector<float> RunExperts(Backend& b, const ExpertsCase& c, const TestTensor& x,
                              const TestTensor& w13, const TestTensor& w2,
                              const TestTensor& weights, const Aligned& a,
                              int64_t decode_tokens = 0) {
  const int64_t len = c.tokens * c.top_k + c.experts * (c.block - 1);
  TestTensor gate_up(b, DType::kF32, {len, 2 * c.inter}), act(b, DType::kF32, {len, c.inter});
  TestTensor down(b, DType::kF32, {len, c.hidden}), out(b, DType::kF32, {c.tokens, c.hidden});
  b.MoeExperts({.x = x.view(),
                .w13 = w13.view(),
                .w2 = w2.view(),
                .topk_weights = weights.view(),
                .sorted_ids = a.sorted.view(),
                .block_expert_ids = a.blocks.view(),
                .expert_offsets = a.offsets.view(),
                .num_tokens_post_pad = a.post_pad.view(),
                .block_size = c.block,
                .workspace_gate_up = gate_up.view(),
                .workspace_act = act.view(),
                .workspace_down = down.view(),
                .out = out.view(),
                .decode_tokens = decode_tokens});
  return out.Read();
}

Aligned CloneAligned(const Aligned& a, Backend& to) {
  return {a.sorted.CloneTo(to), a.blocks.CloneTo(to), a.offsets.CloneTo(to),
          a.post_pad.CloneTo(to)};
}

}  // namespace

void ExpectMoeRouteMatchesRef(const ParityBackends& b) {
  std::mt19937 rng(41);
  const std::vector<RouteCase> cases = {
      {1, 1, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, 1, 1, false, false},
      {8, 2, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, 1, 1, true, false},
      {64, 6, MoeScoring::kSoftmax, MoeTopkMethod::kGreedy, 1, 1, false, false},
      {64, 6, MoeScoring::kSoftmax, MoeTopkMethod::kGroupLimitedGreedy, 8, 3, false, false},
      {256, 8, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 8, 4, true, true},
      {8, 1, MoeScoring::kSigmoid, MoeTopkMethod::kNoauxTc, 4, 2, true, true},
  };
  for (const RouteCase& c : cases) {
    for (int64_t tokens : {1, 65, 1000}) {
      // Logits on a coarse grid make exact ties between experts common.
      std::vector<float> logits = RandomFloats(rng, tokens * c.experts, -4, 4);
      for (float& l : logits) l = std::round(l * 4) / 4;
      TestTensor logits_t = FloatTensor(b.ref, DType::kF32, {tokens, c.experts}, logits);
      TestTensor bias = RandomTensor(b.ref, rng, DType::kF32, {c.experts}, -0.1f, 0.1f);
      TestTensor ids_ref(b.ref, DType::kI32, {tokens, c.top_k});
      TestTensor w_ref(b.ref, DType::kF32, {tokens, c.top_k});
      TestTensor logits_c = logits_t.CloneTo(b.dut), bias_c = bias.CloneTo(b.dut);
      TestTensor ids_dut(b.dut, DType::kI32, {tokens, c.top_k});
      TestTensor w_dut(b.dut, DType::kF32, {tokens, c.top_k});
      const bool noaux = c.method == MoeTopkMethod::kNoauxTc;
      MoeRouteParams p;
      p.scoring = c.scoring;
      p.method = c.method;
      p.n_group = c.n_group;
      p.topk_group = c.topk_group;
      p.top_k = c.top_k;
      p.norm_topk_prob = c.norm;
      p.scale_always = c.scale_always;
      p.routed_scaling_factor = 2.5f;
      p.logits = logits_t.view();
      p.correction_bias = noaux ? bias.view() : TensorView();
      p.topk_ids = ids_ref.view();
      p.topk_weights = w_ref.view();
      b.ref.MoeRoute(p);
      p.logits = logits_c.view();
      p.correction_bias = noaux ? bias_c.view() : TensorView();
      p.topk_ids = ids_dut.view();
      p.topk_weights = w_dut.view();
      b.dut.MoeRoute(p);
      const std::string what = std::to_string(c.experts) + " experts top" +
                               std::to_string(c.top_k) + " tokens=" + std::to_string(tokens);
      EXPECT_EQ(ids_dut.ReadInts(), ids_ref.ReadInts()) << what;
      ExpectClose(w_dut.Read(), w_ref.Read(), 0, 1e-6, what);
    }
  }
}

void ExpectMoeAlignMatchesRefExactly(const ParityBackends& b) {
  std::mt19937 rng(42);
  for (int experts : {1, 8, 64, 256}) {
    for (int top_k : {1, 2, 6, 8}) {
      if (top_k > experts) continue;
      for (int64_t tokens : {1, 63, 1000}) {
        for (int block : {1, 16, 64}) {
          const int64_t len = tokens * top_k + experts * (block - 1);
          TestTensor ids =
              IntTensor(b.ref, {tokens, top_k}, RandomTopk(rng, tokens, experts, top_k));
          TestTensor ids_c = ids.CloneTo(b.dut);
          Aligned r = Align(b.ref, ids, experts, block, len);
          Aligned c = Align(b.dut, ids_c, experts, block, len);
          const std::string what = std::to_string(experts) + "e top" + std::to_string(top_k) +
                                   " t" + std::to_string(tokens) + " b" + std::to_string(block);
          const int32_t total = r.post_pad.ReadInts()[0];
          ASSERT_EQ(c.post_pad.ReadInts()[0], total) << what;
          EXPECT_EQ(c.offsets.ReadInts(), r.offsets.ReadInts()) << what;
          const std::vector<int32_t> sr = r.sorted.ReadInts(), sc = c.sorted.ReadInts();
          EXPECT_EQ(std::vector<int32_t>(sc.begin(), sc.begin() + total),
                    std::vector<int32_t>(sr.begin(), sr.begin() + total))
              << what;
          const std::vector<int32_t> br = r.blocks.ReadInts(), bc = c.blocks.ReadInts();
          EXPECT_EQ(std::vector<int32_t>(bc.begin(), bc.begin() + total / block),
                    std::vector<int32_t>(br.begin(), br.begin() + total / block))
              << what;
        }
      }
    }
  }
}

void ExpectMoeExpertsMatchRef(const ParityBackends& b) {
  std::mt19937 rng(43);
  const std::vector<ExpertsCase> cases = {
      {1, 1, 1, 16, 8, 1},      {8, 2, 63, 130, 72, 16},   {8, 8, 65, 33, 17, 4},
      {64, 6, 64, 130, 72, 16}, {8, 6, 1, 2048, 1408, 16}, {256, 8, 5, 64, 40, 16},
      {8, 6, 200, 96, 64, 1},   {8, 2, 3, 33, 17, 4},
  };
  for (DType wdt : {DType::kBF16, DType::kF32}) {
    for (const ExpertsCase& c : cases) {
      const int64_t len = c.tokens * c.top_k + c.experts * (c.block - 1);
      TestTensor ids =
          IntTensor(b.ref, {c.tokens, c.top_k}, RandomTopk(rng, c.tokens, c.experts, c.top_k));
      Aligned a = Align(b.ref, ids, c.experts, c.block, len);
      TestTensor x = RandomTensor(b.ref, rng, DType::kF32, {c.tokens, c.hidden});
      // Weights with variance 1 / fan_in, as trained layers roughly have, keep every stage O(1).
      const float r13 = std::sqrt(3.0f / c.hidden), r2 = std::sqrt(3.0f / c.inter);
      TestTensor w13 = RandomTensor(b.ref, rng, wdt, {c.experts, 2 * c.inter, c.hidden}, -r13, r13);
      TestTensor w2 = RandomTensor(b.ref, rng, wdt, {c.experts, c.hidden, c.inter}, -r2, r2);
      TestTensor weights = RandomTensor(b.ref, rng, DType::kF32, {c.tokens, c.top_k}, 0, 1);
      auto run = [&](Backend& to, const Aligned& aligned) {
        return RunExperts(to, c, x.CloneTo(to), w13.CloneTo(to), w2.CloneTo(to),
                          weights.CloneTo(to), aligned);
      };
      const std::vector<float> expected = run(b.ref, a);
      const std::vector<float> actual = run(b.dut, CloneAligned(a, b.dut));
      const std::string what = std::string(DTypeName(wdt)) + " " + std::to_string(c.experts) +
                               "e top" + std::to_string(c.top_k) + " t" + std::to_string(c.tokens);
      ExpectClose(actual, expected, 1e-5, 1e-4, what);

      // bf16 activations: x and the expert activations are rounded to bf16 before they meet
      // bf16 weights. x is rounded identically on both backends; an activation is computed in
      // f32 first and can round to the neighbouring bf16 value where the backends' f32 results
      // straddle a rounding boundary (odds ~2^-15 per element), which moves one term of one
      // down-projection sum by at most 2^-8 of |act| * |w2|: the tolerance allows one such term
      // per pair. Rounding itself moves results far more than that, which the last check uses
      // to tell a rounding kernel from one that does not round.
      const std::vector<float> expected_bf16 = run(b.ref_bf16, a);
      const std::vector<float> actual_bf16 = run(b.dut_bf16, CloneAligned(a, b.dut_bf16));
      const double one_flip = c.top_k * std::ldexp(4.0 * r2, -8);
      ExpectClose(actual_bf16, expected_bf16, 1e-5 + one_flip, 1e-4, what + " bf16 activations");
      if (wdt == DType::kBF16 && c.hidden * c.inter >= 64 * 40) {
        double off = 0, rounding = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
          off = std::max(off, std::abs(double{actual_bf16[i]} - expected_bf16[i]));
          rounding = std::max(rounding, std::abs(double{expected[i]} - expected_bf16[i]));
        }
        EXPECT_LT(4 * off, rounding) << what;
      }
    }
  }
}

// A decode token's output is the same bit for bit whether it is computed alone or beside other
// decode and prompt tokens (rows [0, decode_tokens) of the call), and a prompt token's output
// does not depend on how many tokens before it are decodes; both match the oracle. Small aligned
// blocks mix decode and prompt rows of one expert; k % 8 == 0 and odd k both appear.
void ExpectMoeExpertsDecodeTokensInvariant(Backend& ref, Backend& invariant) {
  std::mt19937 rng(47);
  for (DType wdt : {DType::kBF16, DType::kF32}) {
    for (const ExpertsCase& c : {ExpertsCase{8, 2, 12, 64, 40, 4}, ExpertsCase{6, 3, 9, 33, 17, 2}}) {
      const std::string what = std::string(DTypeName(wdt)) + " hidden " + std::to_string(c.hidden);
      const int64_t len = c.tokens * c.top_k + c.experts * (c.block - 1);
      const std::vector<int32_t> topk = RandomTopk(rng, c.tokens, c.experts, c.top_k);
      TestTensor ids = IntTensor(ref, {c.tokens, c.top_k}, topk);
      TestTensor x = RandomTensor(ref, rng, DType::kF32, {c.tokens, c.hidden});
      const float r13 = std::sqrt(3.0f / c.hidden), r2 = std::sqrt(3.0f / c.inter);
      TestTensor w13 = RandomTensor(ref, rng, wdt, {c.experts, 2 * c.inter, c.hidden}, -r13, r13);
      TestTensor w2 = RandomTensor(ref, rng, wdt, {c.experts, c.hidden, c.inter}, -r2, r2);
      TestTensor weights = RandomTensor(ref, rng, DType::kF32, {c.tokens, c.top_k}, 0, 1);
      const Aligned a = Align(ref, ids, c.experts, c.block, len);
      const std::vector<float> expected = RunExperts(ref, c, x, w13, w2, weights, a);
      TestTensor w13_d = w13.CloneTo(invariant), w2_d = w2.CloneTo(invariant);
      auto run_all = [&](int64_t decode_tokens) {
        return RunExperts(invariant, c, x.CloneTo(invariant), w13_d, w2_d,
                          weights.CloneTo(invariant), CloneAligned(a, invariant), decode_tokens);
      };
      const std::vector<float> prompt = run_all(0);
      ExpectClose(prompt, expected, 1e-5, 1e-4, what + " all prompt");
      // Each token alone, as the one decode of its call.
      std::vector<float> alone;
      const std::vector<float> x_all = x.Read(), w_all = weights.Read();
      for (int64_t t = 0; t < c.tokens; ++t) {
        ExpertsCase one = c;
        one.tokens = 1;
        const int64_t len1 = c.top_k + c.experts * (c.block - 1);
        TestTensor ids1 = IntTensor(ref, {1, c.top_k},
                                    std::vector<int32_t>(topk.begin() + t * c.top_k,
                                                         topk.begin() + (t + 1) * c.top_k));
        TestTensor x1(ref, DType::kF32, {1, c.hidden}), w1(ref, DType::kF32, {1, c.top_k});
        x1.Write(std::vector<float>(x_all.begin() + t * c.hidden, x_all.begin() + (t + 1) * c.hidden));
        w1.Write(std::vector<float>(w_all.begin() + t * c.top_k, w_all.begin() + (t + 1) * c.top_k));
        const Aligned a1 = Align(ref, ids1, c.experts, c.block, len1);
        const std::vector<float> row = RunExperts(invariant, one, x1.CloneTo(invariant), w13_d, w2_d,
                                                  w1.CloneTo(invariant), CloneAligned(a1, invariant), 1);
        alone.insert(alone.end(), row.begin(), row.end());
      }
      ExpectClose(alone, expected, 1e-5, 1e-4, what + " decode tokens alone");
      for (int64_t d : {c.tokens, int64_t{5}, int64_t{1}}) {
        const std::vector<float> got = run_all(d);
        for (int64_t i = 0; i < c.tokens * c.hidden; ++i) {
          const float want = i / c.hidden < d ? alone[i] : prompt[i];
          ASSERT_EQ(got[i], want) << what << " decode_tokens=" << d << " element " << i;
        }
      }
    }
  }
  EXPECT_TRUE(invariant.Synchronize().ok());
}

}  // namespace mlaserve::test
