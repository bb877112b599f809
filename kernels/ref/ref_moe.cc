// RefBackend: MoE router, block alignment and routed experts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/ref/ref_access.h"
#include "kernels/ref/ref_backend.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

using ref::Load;
using ref::LoadInput;
using ref::LoadI32;
using ref::Off;
using ref::Store;

// Index of the largest value[i] with allowed[i], ties to the lower index; -1 if none is allowed.
int ArgMaxAllowed(const std::vector<float>& value, const std::vector<bool>& allowed) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(value.size()); ++i) {
    if (allowed[i] && (best < 0 || value[i] > value[best])) best = i;
  }
  return best;
}

// Marks as allowed only the experts of the topk_group best groups by `group_score`.
void KeepBestGroups(const std::vector<float>& group_score, int topk_group, int group_size,
                    std::vector<bool>& allowed) {
  std::vector<bool> group_open(group_score.size(), true);
  std::vector<bool> group_kept(group_score.size(), false);
  for (int i = 0; i < topk_group; ++i) {
    const int g = ArgMaxAllowed(group_score, group_open);
    group_open[g] = false;
    group_kept[g] = true;
  }
  for (size_t e = 0; e < allowed.size(); ++e) allowed[e] = group_kept[e / group_size];
}

// Router scores of row t as f32 values (computed in double, rounded once), the precision every
// backend keeps them in.
void RouterScores(const TensorView& logits, int64_t t, MoeScoring scoring,
                  std::vector<float>& scores) {
  const int num_experts = static_cast<int>(scores.size());
  if (scoring == MoeScoring::kSigmoid) {
    for (int e = 0; e < num_experts; ++e) {
      scores[e] = static_cast<float>(1.0 / (1.0 + std::exp(-Load(logits, Off(logits, t, e)))));
    }
    return;
  }
  double max = -std::numeric_limits<double>::infinity();
  for (int e = 0; e < num_experts; ++e) max = std::max(max, Load(logits, Off(logits, t, e)));
  double sum = 0.0;
  for (int e = 0; e < num_experts; ++e) sum += std::exp(Load(logits, Off(logits, t, e)) - max);
  for (int e = 0; e < num_experts; ++e) {
    scores[e] = static_cast<float>(std::exp(Load(logits, Off(logits, t, e)) - max) / sum);
  }
}

// A group's rank: its best choice value, or (noaux_tc) the f32 sum of its two best.
float GroupScore(const float* members, int group_size, bool top_two_sum) {
  std::vector<float> sorted(members, members + group_size);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  return top_two_sum ? sorted[0] + sorted[1] : sorted[0];
}

}  // namespace

void RefBackend::RunMoeRoute(const MoeRouteParams& p) {
  CheckTensor(p.logits, "MoeRoute.logits", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.logits.size(0);
  const int num_experts = static_cast<int>(p.logits.size(1));
  const int top_k = p.top_k;
  MLASERVE_CHECK(top_k >= 1 && top_k <= num_experts);
  CheckTensor(p.topk_ids, "MoeRoute.topk_ids", DType::kI32, {num_tokens, top_k});
  CheckTensor(p.topk_weights, "MoeRoute.topk_weights", DType::kF32, {num_tokens, top_k});
  const bool grouped = p.method != MoeTopkMethod::kGreedy;
  const bool noaux = p.method == MoeTopkMethod::kNoauxTc;
  int group_size = num_experts;
  if (grouped) {
    MLASERVE_CHECK(p.n_group >= 1 && num_experts % p.n_group == 0);
    MLASERVE_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group);
    group_size = num_experts / p.n_group;
    MLASERVE_CHECK(top_k <= p.topk_group * group_size);
  }
  if (noaux) {
    MLASERVE_CHECK(group_size >= 2);
    CheckTensor(p.correction_bias, "MoeRoute.correction_bias", DType::kF32, {num_experts});
  }

  std::vector<float> scores(num_experts), choice(num_experts), group_score(grouped ? p.n_group : 0);
  std::vector<bool> allowed(num_experts);
  std::vector<int> ids(top_k);
  for (int64_t t = 0; t < num_tokens; ++t) {
    RouterScores(p.logits, t, p.scoring, scores);
    for (int e = 0; e < num_experts; ++e) {
      const double bias = noaux ? Load(p.correction_bias, Off(p.correction_bias, e)) : 0.0;
      choice[e] = static_cast<float>(scores[e] + bias);
    }
    allowed.assign(num_experts, true);
    if (grouped) {
      for (int g = 0; g < p.n_group; ++g) {
        group_score[g] = GroupScore(&choice[g * group_size], group_size, noaux);
      }
      KeepBestGroups(group_score, p.topk_group, group_size, allowed);
    }
    double weight_sum = 0.0;
    for (int k = 0; k < top_k; ++k) {
      ids[k] = ArgMaxAllowed(choice, allowed);
      allowed[ids[k]] = false;
      weight_sum += scores[ids[k]];
    }
    const bool normalize = top_k > 1 && p.norm_topk_prob;
    const bool scale = p.scale_always || !normalize;
    for (int k = 0; k < top_k; ++k) {
      double w = scores[ids[k]];
      if (normalize) w /= weight_sum + 1e-20;
      if (scale) w *= p.routed_scaling_factor;
      p.topk_ids.ptr<int32_t>()[Off(p.topk_ids, t, k)] = ids[k];
      Store(p.topk_weights, Off(p.topk_weights, t, k), w);
    }
  }
}

void RefBackend::RunMoeAlignBlockSize(const MoeAlignParams& p) {
  CheckTensor(p.topk_ids, "MoeAlign.topk_ids", DType::kI32, {kAnyDim, kAnyDim});
  const int64_t num_pairs = p.topk_ids.size(0) * p.topk_ids.size(1);
  const int64_t top_k = p.topk_ids.size(1);
  const int num_experts = p.num_experts;
  const int64_t block = p.block_size;
  MLASERVE_CHECK(num_experts >= 1 && block >= 1);
  const int64_t len = num_pairs + num_experts * (block - 1);
  CheckTensor(p.sorted_ids, "MoeAlign.sorted_ids", DType::kI32, {len});
  CheckTensor(p.block_expert_ids, "MoeAlign.block_expert_ids", DType::kI32,
              {(len + block - 1) / block});
  CheckTensor(p.expert_offsets, "MoeAlign.expert_offsets", DType::kI32, {num_experts + 1});
  CheckTensor(p.num_tokens_post_pad, "MoeAlign.num_tokens_post_pad", DType::kI32, {1});

  auto expert_of = [&](int64_t pair) {
    const int32_t e = LoadI32(p.topk_ids, Off(p.topk_ids, pair / top_k, pair % top_k));
    MLASERVE_CHECK(e >= 0 && e < num_experts);
    return e;
  };
  std::vector<int64_t> offsets(num_experts + 1, 0);
  for (int64_t pair = 0; pair < num_pairs; ++pair) ++offsets[expert_of(pair) + 1];
  for (int e = 0; e < num_experts; ++e) {
    offsets[e + 1] = offsets[e] + (offsets[e + 1] + block - 1) / block * block;
  }
  // Visiting pairs in ascending order keeps each expert's run sorted by pair index.
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
  int32_t* sorted = p.sorted_ids.ptr<int32_t>();
  const int64_t sorted_stride = p.sorted_ids.stride(0);
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    sorted[cursor[expert_of(pair)]++ * sorted_stride] = static_cast<int32_t>(pair);
  }
  for (int e = 0; e < num_experts; ++e) {
    for (int64_t r = cursor[e]; r < offsets[e + 1]; ++r) {
      sorted[r * sorted_stride] = static_cast<int32_t>(num_pairs);
    }
    for (int64_t b = offsets[e] / block; b < offsets[e + 1] / block; ++b) {
      p.block_expert_ids.ptr<int32_t>()[Off(p.block_expert_ids, b)] = e;
    }
  }
  for (int e = 0; e <= num_experts; ++e) {
    p.expert_offsets.ptr<int32_t>()[Off(p.expert_offsets, e)] = static_cast<int32_t>(offsets[e]);
  }
  p.num_tokens_post_pad.ptr<int32_t>()[0] = static_cast<int32_t>(offsets[num_experts]);
}

void RefBackend::RunMoeExperts(const MoeExpertsParams& p) {
  const MoeExpertsShape shape = CheckMoeExperts(p);
  const int64_t num_tokens = shape.num_tokens, hidden = shape.hidden;
  const int64_t num_experts = shape.num_experts, inter = shape.inter, top_k = shape.top_k;
  const int64_t num_pairs = shape.num_pairs, block = shape.block;
  const int64_t total = shape.total;

  // Per-token sums in double, so the result does not depend on the order of the sorted rows.
  std::vector<double> acc(num_tokens * hidden, 0.0);
  const bool round_x = RoundsGemmInput(activation_dtype(), p.w13.dtype());
  const bool round_act = RoundsGemmInput(activation_dtype(), p.w2.dtype());
  const TensorView &gate_up = p.workspace_gate_up, &act = p.workspace_act, &down = p.workspace_down;
  for (int64_t r = 0; r < total; ++r) {
    const int32_t pair = LoadI32(p.sorted_ids, Off(p.sorted_ids, r));
    if (pair == num_pairs) continue;  // padding
    MLASERVE_CHECK(pair >= 0 && pair < num_pairs);
    const int64_t t = pair / top_k;
    const int32_t e = LoadI32(p.block_expert_ids, Off(p.block_expert_ids, r / block));
    MLASERVE_CHECK(e >= 0 && e < num_experts);
    for (int64_t i = 0; i < 2 * inter; ++i) {
      double dot = 0.0;
      for (int64_t c = 0; c < hidden; ++c) {
        dot += Load(p.w13, Off(p.w13, e, i, c)) * LoadInput(p.x, Off(p.x, t, c), round_x);
      }
      Store(gate_up, Off(gate_up, r, i), dot);
    }
    for (int64_t i = 0; i < inter; ++i) {
      const double g = Load(gate_up, Off(gate_up, r, i));
      Store(act, Off(act, r, i),
            g / (1.0 + std::exp(-g)) * Load(gate_up, Off(gate_up, r, inter + i)));
    }
    const double weight = Load(p.topk_weights, Off(p.topk_weights, t, pair % top_k));
    for (int64_t c = 0; c < hidden; ++c) {
      double dot = 0.0;
      for (int64_t i = 0; i < inter; ++i) {
        dot += Load(p.w2, Off(p.w2, e, c, i)) * LoadInput(act, Off(act, r, i), round_act);
      }
      Store(down, Off(down, r, c), dot);
      acc[t * hidden + c] += weight * Load(down, Off(down, r, c));
    }
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t c = 0; c < hidden; ++c) Store(p.out, Off(p.out, t, c), acc[t * hidden + c]);
  }
}

}  // namespace mlaserve
