#include "engine/layers/moe.h"

namespace mlaserve {

FeedForward::FeedForward(const ModelConfig& config, Backend* backend)
    : c_(config), backend_(backend) {}

TensorView FeedForward::Forward(const LayerWeights& w, int64_t num_tokens, int64_t num_decodes,
                                const TensorView& x, const FfnWorkspace& ws,
                                const TensorView& out) const {
  if (!w.is_moe) {
    Mlp(w.dense, num_tokens, num_decodes, x, ws, out);
    return {};
  }
  Experts(w, num_tokens, num_decodes, x, ws, out);
  if (w.shared.gate_up.empty()) return {};
  const TensorView shared = ws.shared_out.Slice(0, 0, num_tokens);
  Mlp(w.shared, num_tokens, num_decodes, x, ws, shared);
  return shared;
}

void FeedForward::Mlp(const MlpWeights& w, int64_t n, int64_t num_decodes, const TensorView& x,
                      const FfnWorkspace& ws, const TensorView& out) const {
  const int64_t inter = w.down.size(1);
  const TensorView gate_up = TensorView(ws.gate_up.data(), DType::kF32, {n, 2 * inter});
  const TensorView act = TensorView(ws.act.data(), DType::kF32, {n, inter});
  backend_->Gemm({.a = x, .b = w.gate_up, .out = gate_up, .decode_rows = num_decodes});
  backend_->SiluMul({.x = gate_up, .out = act});
  backend_->Gemm({.a = act, .b = w.down, .out = out, .decode_rows = num_decodes});
}

void FeedForward::Experts(const LayerWeights& w, int64_t n, int64_t num_decodes,
                          const TensorView& x, const FfnWorkspace& ws,
                          const TensorView& out) const {
  const int64_t e = c_.n_routed_experts, k = c_.num_experts_per_tok;
  const int64_t inter = c_.moe_intermediate_size;
  Backend& b = *backend_;
  const TensorView logits = ws.router_logits.Slice(0, 0, n);
  b.Gemm({.a = x, .b = w.router, .out = logits, .decode_rows = num_decodes});
  const TensorView ids = ws.topk_ids.Slice(0, 0, n), weights = ws.topk_weights.Slice(0, 0, n);
  b.MoeRoute({.logits = logits,
              .correction_bias = w.router_bias,
              .scoring = c_.scoring_func,
              .method = c_.topk_method,
              .n_group = static_cast<int>(c_.n_group),
              .topk_group = static_cast<int>(c_.topk_group),
              .top_k = static_cast<int>(k),
              .norm_topk_prob = c_.norm_topk_prob,
              .scale_always = c_.ScaleRoutedWeightsAlways(),
              .routed_scaling_factor = static_cast<float>(c_.routed_scaling_factor),
              .topk_ids = ids,
              .topk_weights = weights});
  const int64_t padded = n * k + e * (kMoeAlignBlock - 1);
  const int64_t blocks = (padded + kMoeAlignBlock - 1) / kMoeAlignBlock;
  const TensorView sorted = ws.sorted_ids.Slice(0, 0, padded);
  const TensorView block_experts = ws.block_expert_ids.Slice(0, 0, blocks);
  b.MoeAlignBlockSize({.topk_ids = ids,
                       .num_experts = static_cast<int>(e),
                       .block_size = kMoeAlignBlock,
                       .sorted_ids = sorted,
                       .block_expert_ids = block_experts,
                       .expert_offsets = ws.expert_offsets,
                       .num_tokens_post_pad = ws.num_post_pad});
  b.MoeExperts({.x = x,
                .w13 = w.experts_w13,
                .w2 = w.experts_w2,
                .topk_weights = weights,
                .sorted_ids = sorted,
                .block_expert_ids = block_experts,
                .expert_offsets = ws.expert_offsets,
                .num_tokens_post_pad = ws.num_post_pad,
                .block_size = kMoeAlignBlock,
                .workspace_gate_up = TensorView(ws.expert_gate_up.data(), DType::kF32, {padded, 2 * inter}),
                .workspace_act = TensorView(ws.expert_act.data(), DType::kF32, {padded, inter}),
                .workspace_down = TensorView(ws.expert_down.data(), DType::kF32, {padded, c_.hidden_size}),
                .out = out,
                .decode_tokens = num_decodes});
}

}  // namespace mlaserve
