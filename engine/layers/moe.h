// Feed-forward layers: the dense SiLU-gated MLP and the DeepSeek mixture of experts (router,
// moe_align_block_size, grouped expert GEMMs with fused SiLU·mul, weighted combine, plus the
// shared experts).
#ifndef MLASERVE_ENGINE_LAYERS_MOE_H_
#define MLASERVE_ENGINE_LAYERS_MOE_H_

#include "engine/config.h"
#include "engine/forward_batch.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

namespace mlaserve {

// Scratch tensors for the largest step (rows = max tokens). Never cleared.
struct FfnWorkspace {
  TensorView gate_up;           // [rows, 2 * max(intermediate_size, shared inter)]
  TensorView act;               // [rows, max(intermediate_size, shared inter)]
  TensorView shared_out;        // [rows, hidden]
  TensorView router_logits;     // [rows, num_experts]
  TensorView topk_ids;          // [rows, top_k] i32
  TensorView topk_weights;      // [rows, top_k]
  TensorView sorted_ids;        // [rows * top_k + num_experts * (block - 1)] i32
  TensorView block_expert_ids;  // [ceil(len(sorted_ids) / block)] i32
  TensorView expert_offsets;    // [num_experts + 1] i32
  TensorView num_post_pad;      // [1] i32
  TensorView expert_gate_up;    // [len(sorted_ids), 2 * moe_inter]
  TensorView expert_act;        // [len(sorted_ids), moe_inter]
  TensorView expert_down;       // [len(sorted_ids), hidden]
};

// Rows each expert's run is padded to in MoeAlignBlockSize.
inline constexpr int kMoeAlignBlock = 16;

class FeedForward {
 public:
  FeedForward(const ModelConfig& config, Backend* backend);

  // x: [num_tokens, hidden] f32 (normalised); out: [num_tokens, hidden] f32. Tokens
  // [0, num_decodes) are single-token decodes (GemmParams::decode_rows). Returns the shared
  // experts' output (a view into ws) when the layer has them, else an empty view: the layer's
  // output is then out + that view, which the caller adds where it adds the layer to the
  // residual stream (RmsNormParams::addend), one op and one pass over the rows fewer than an
  // Add here.
  [[nodiscard]] TensorView Forward(const LayerWeights& w, int64_t num_tokens, int64_t num_decodes,
                                   const TensorView& x, const FfnWorkspace& ws,
                                   const TensorView& out) const;

 private:
  void Mlp(const MlpWeights& w, int64_t num_tokens, int64_t num_decodes, const TensorView& x,
           const FfnWorkspace& ws, const TensorView& out) const;
  void Experts(const LayerWeights& w, int64_t num_tokens, int64_t num_decodes,
               const TensorView& x, const FfnWorkspace& ws, const TensorView& out) const;

  const ModelConfig& c_;
  Backend* backend_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_LAYERS_MOE_H_
