// Multi-head latent attention (DeepSeek-V2/V3) over the paged latent KV cache.
// Decodes use weight absorption (q_nope · W_UK, attention over cached latents, · W_UVᵀ);
// prefill chunks decompress latents through kv_b_proj and attend causally, plus rounds over
// cached context merged by log-sum-exp (see engine/forward_batch.h).
#ifndef MLASERVE_ENGINE_LAYERS_MLA_ATTENTION_H_
#define MLASERVE_ENGINE_LAYERS_MLA_ATTENTION_H_

#include "engine/config.h"
#include "engine/forward_batch.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

namespace mlaserve {

// Scratch tensors sized for the largest step (rows = max tokens, seqs = max sequences,
// ctx = context_chunk_tokens). Allocated once, never cleared: each step writes what it reads.
struct MlaWorkspace {
  TensorView q_a;          // [rows, q_lora_rank] (q_lora only)
  TensorView q;            // [rows, num_heads, qk_head_dim]
  TensorView kv_a;         // [rows, kv_lora_rank + rope_dim]
  TensorView latent;       // [rows, kv_lora_rank]
  TensorView q_latent;     // [seqs, num_heads, kv_lora_rank]
  TensorView attn_latent;  // [seqs, num_heads, kv_lora_rank]
  TensorView kv;           // [rows, num_heads * (qk_nope_dim + v_head_dim)]
  TensorView lse;          // [rows, num_heads]
  TensorView ctx_latent;   // [ctx, kv_lora_rank + rope_dim]
  TensorView ctx_kv;       // [ctx, num_heads * (qk_nope_dim + v_head_dim)]
  TensorView round_out;    // [rows, num_heads, v_head_dim]
  TensorView round_lse;    // [rows, num_heads]
  TensorView attn_out;     // [rows, num_heads * v_head_dim]
  // Split-KV partial results, [split_items] rows = MlaSplitCapacity(seqs, mla_split_workers,
  // mla_split_rule) (ForwardLimits);
  // empty without a split plan.
  TensorView split_out;    // [split_items, num_heads, kv_lora_rank]
  TensorView split_lse;    // [split_items, num_heads]
};

class MlaAttention {
 public:
  // cos_sin: [max_positions, rope_dim] f32 (engine/rope_cache.h).
  MlaAttention(const ModelConfig& config, Backend* backend, TensorView cos_sin,
               float softmax_scale);

  // x: [num_tokens, hidden] f32 (normalised input); out: [num_tokens, hidden] f32.
  // kv_cache: [num_blocks, block_size, kv_lora_rank + rope_dim], this layer's cache; the step's
  // new latents are written into it.
  void Forward(const LayerWeights& w, const ForwardBatch& fb, const TensorView& x,
               const TensorView& kv_cache, const MlaWorkspace& ws, const TensorView& out) const;

 private:
  void Decode(const LayerWeights& w, const ForwardBatch& fb, const TensorView& q,
              const TensorView& kv_cache, const MlaWorkspace& ws, const TensorView& attn) const;
  void Prefill(const LayerWeights& w, const ForwardBatch& fb, const TensorView& q,
               const TensorView& kv_a, const TensorView& kv_cache, const MlaWorkspace& ws,
               const TensorView& attn) const;

  const ModelConfig& c_;
  Backend* backend_;
  TensorView cos_sin_;
  float softmax_scale_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_LAYERS_MLA_ATTENTION_H_
