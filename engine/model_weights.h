// The weights of a DeepSeek-V2/V3 model in backend memory, loaded and shape-checked from a
// Hugging Face checkpoint, plus the derived per-head matrices that MLA weight absorption uses.
#ifndef MLASERVE_ENGINE_MODEL_WEIGHTS_H_
#define MLASERVE_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/config.h"
#include "engine/weight_loader.h"
#include "kernels/backend.h"

namespace mlaserve {

struct MlpWeights {
  TensorView gate_up;  // [2 * inter, hidden] w (gate rows then up rows)
  TensorView down;     // [hidden, inter] w
};

struct LayerWeights {
  TensorView input_norm;          // [hidden] f32
  TensorView post_attention_norm;  // [hidden] f32
  // Attention. q_proj is set when q_lora_rank == 0, otherwise q_a / q_a_norm / q_b.
  TensorView q_proj;      // [num_heads * qk_head_dim, hidden] w
  TensorView q_a;         // [q_lora_rank, hidden] w
  TensorView q_a_norm;    // [q_lora_rank] f32
  TensorView q_b;         // [num_heads * qk_head_dim, q_lora_rank] w
  TensorView kv_a;        // [kv_lora_rank + rope_dim, hidden] w
  TensorView kv_a_norm;   // [kv_lora_rank] f32
  TensorView kv_b;        // [num_heads * (qk_nope_dim + v_head_dim), kv_lora_rank] w
  TensorView w_uk_t;      // [num_heads, kv_lora_rank, qk_nope_dim] w (derived from kv_b)
  TensorView w_uv;        // [num_heads, v_head_dim, kv_lora_rank] w (strided view into kv_b)
  TensorView o_proj;      // [hidden, num_heads * v_head_dim] w
  // Feed-forward: `dense` for dense layers; router + experts + shared for MoE layers.
  bool is_moe = false;
  MlpWeights dense;
  TensorView router;           // [num_experts, hidden] f32
  TensorView router_bias;      // [num_experts] f32 (noaux_tc only)
  TensorView experts_w13;      // [num_experts, 2 * moe_inter, hidden] w
  TensorView experts_w2;       // [num_experts, hidden, moe_inter] w
  MlpWeights shared;           // inter = moe_inter * n_shared_experts; absent when 0 shared
};

struct ModelWeights {
  TensorView embed;       // [vocab, hidden] w
  std::vector<LayerWeights> layers;
  TensorView final_norm;  // [hidden] f32
  TensorView lm_head;     // [vocab, hidden] w (the embedding when tied)
  std::vector<DeviceBuffer> buffers;  // owns every tensor above
  uint64_t weight_bytes = 0;
};

// Loads every tensor the model needs; any missing, mis-shaped or unexpected tensor is an
// error naming it. Tensors of layers >= num_hidden_layers (V3's multi-token-prediction
// layers) and rotary inv_freq buffers are ignored.
absl::StatusOr<ModelWeights> LoadModelWeights(const ModelConfig& config,
                                              const Checkpoint& checkpoint, Backend* backend);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_MODEL_WEIGHTS_H_
