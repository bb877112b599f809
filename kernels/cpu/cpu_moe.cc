// MoE router: scores, (grouped) top-k and combine weights, one token per iteration.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_context.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

// Index of the largest value[i] with allowed[i] != 0, ties to the lower index; -1 if none.
int ArgMaxAllowed(const float* value, const float* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (allowed[i] != 0.0f && (best < 0 || value[i] > value[best])) best = i;
  }
  return best;
}

// Routes one token. scratch: 3 * num_experts + n_group floats.
void RouteToken(const MoeRouteParams& p, int64_t t, int num_experts, int group_size,
                float* scratch) {
  float* scores = scratch;
  float* choice = scores + num_experts;
  float* allowed = choice + num_experts;
  float* group_score = allowed + num_experts;
  const float* logits = p.logits.ptr<const float>() + t * p.logits.stride(0);
  const bool noaux = p.method == MoeTopkMethod::kNoauxTc;
  // Scores in double, rounded once, so that the expert choice matches the oracle bit for bit.
  if (p.scoring == MoeScoring::kSoftmax) {
    double max = -std::numeric_limits<double>::infinity();
    for (int e = 0; e < num_experts; ++e) max = logits[e] > max ? logits[e] : max;
    double sum = 0.0;
    for (int e = 0; e < num_experts; ++e) sum += std::exp(static_cast<double>(logits[e]) - max);
    for (int e = 0; e < num_experts; ++e) {
      scores[e] = static_cast<float>(std::exp(static_cast<double>(logits[e]) - max) / sum);
    }
  } else {
    for (int e = 0; e < num_experts; ++e) {
      scores[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))));
    }
  }
  for (int e = 0; e < num_experts; ++e) {
    const double bias =
        noaux ? p.correction_bias.ptr<const float>()[e * p.correction_bias.stride(0)] : 0.0;
    choice[e] = static_cast<float>(scores[e] + bias);
    allowed[e] = 1.0f;
  }
  if (p.method != MoeTopkMethod::kGreedy) {
    for (int g = 0; g < p.n_group; ++g) {
      const float* members = choice + g * group_size;
      const int first = ArgMaxAllowed(members, allowed + g * group_size, group_size);
      float best = members[first];
      if (noaux) {
        allowed[g * group_size + first] = 0.0f;
        best += members[ArgMaxAllowed(members, allowed + g * group_size, group_size)];
        allowed[g * group_size + first] = 1.0f;
      }
      group_score[g] = best;
    }
    // Keep the topk_group best groups: a group's experts stay allowed iff it is picked, so a
    // group whose first expert is not yet allowed is still open.
    for (int e = 0; e < num_experts; ++e) allowed[e] = 0.0f;
    for (int i = 0; i < p.topk_group; ++i) {
      int g_best = -1;
      for (int g = 0; g < p.n_group; ++g) {
        if (allowed[g * group_size] == 0.0f &&
            (g_best < 0 || group_score[g] > group_score[g_best])) {
          g_best = g;
        }
      }
      for (int e = 0; e < group_size; ++e) allowed[g_best * group_size + e] = 1.0f;
    }
  }
  int32_t* ids = p.topk_ids.ptr<int32_t>() + t * p.topk_ids.stride(0);
  float* weights = p.topk_weights.ptr<float>() + t * p.topk_weights.stride(0);
  double weight_sum = 0.0;
  for (int k = 0; k < p.top_k; ++k) {
    ids[k] = ArgMaxAllowed(choice, allowed, num_experts);
    allowed[ids[k]] = 0.0f;
    weight_sum += scores[ids[k]];
  }
  const bool normalize = p.top_k > 1 && p.norm_topk_prob;
  const bool scale = p.scale_always || !normalize;
  for (int k = 0; k < p.top_k; ++k) {
    double w = scores[ids[k]];
    if (normalize) w /= weight_sum + 1e-20;
    if (scale) w *= p.routed_scaling_factor;
    weights[k] = static_cast<float>(w);
  }
}

}  // namespace

void CpuMoeRoute(const CpuContext& ctx, const MoeRouteParams& p) {
  CheckTensor(p.logits, "MoeRoute.logits", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.logits.size(0);
  const int num_experts = static_cast<int>(p.logits.size(1));
  MLASERVE_CHECK(p.top_k >= 1 && p.top_k <= num_experts);
  CheckTensor(p.topk_ids, "MoeRoute.topk_ids", DType::kI32, {num_tokens, p.top_k});
  CheckTensor(p.topk_weights, "MoeRoute.topk_weights", DType::kF32, {num_tokens, p.top_k});
  int group_size = num_experts;
  if (p.method != MoeTopkMethod::kGreedy) {
    MLASERVE_CHECK(p.n_group >= 1 && num_experts % p.n_group == 0);
    MLASERVE_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group);
    group_size = num_experts / p.n_group;
    MLASERVE_CHECK(p.top_k <= p.topk_group * group_size);
  }
  if (p.method == MoeTopkMethod::kNoauxTc) {
    MLASERVE_CHECK(group_size >= 2);
    CheckTensor(p.correction_bias, "MoeRoute.correction_bias", DType::kF32, {num_experts});
  }
  MLASERVE_CHECK(3 * num_experts + p.n_group <= CpuContext::kOpScratchFloats);
  ctx.Parallel(ctx.ThreadsFor(num_tokens * num_experts * 16), [&](int t, int team) {
    const Range r = SplitRange(num_tokens, team, t);
    for (int64_t tok = r.begin; tok < r.end; ++tok) {
      RouteToken(p, tok, num_experts, group_size, ctx.OpScratch(t));
    }
  });
}

}  // namespace mlaserve
