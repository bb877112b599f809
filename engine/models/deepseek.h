// DeepseekModel: the DeepSeek-V2/V3 decoder (embedding, MLA + MoE/dense layers, final norm,
// lm_head) over one Backend, with its paged latent KV cache and every workspace allocated once
// at creation for the largest step.
#ifndef MLASERVE_ENGINE_MODELS_DEEPSEEK_H_
#define MLASERVE_ENGINE_MODELS_DEEPSEEK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/config.h"
#include "engine/forward_batch.h"
#include "engine/layers/mla_attention.h"
#include "engine/layers/moe.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

namespace mlaserve {

struct ModelOptions {
  int64_t max_num_tokens = 2048;       // tokens per forward step
  int64_t max_num_seqs = 64;           // sequences per forward step
  int64_t max_model_len = 4096;        // positions the rope table covers
  int64_t block_size = 64;             // tokens per KV block
  int64_t num_kv_blocks = 0;           // including the reserved block 0
  int64_t context_chunk_tokens = 4096; // cached-context tokens gathered per prefill round
  DType kv_cache_dtype = DType::kF32;
};

class DeepseekModel {
 public:
  // Takes ownership of `weights`; `backend` must outlive the model.
  static absl::StatusOr<std::unique_ptr<DeepseekModel>> Create(const ModelConfig& config,
                                                               ModelWeights weights,
                                                               Backend* backend,
                                                               const ModelOptions& options);

  // Limits for a ForwardBatchBuilder that feeds this model.
  ForwardLimits forward_limits() const;

  // Runs one step. Returns logits [batch.num_logits, vocab] f32, valid until the next call.
  TensorView Forward(const ForwardBatch& batch);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  uint64_t weight_bytes() const { return weights_.weight_bytes; }
  uint64_t kv_cache_bytes() const { return kv_cache_bytes_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  DeepseekModel(const ModelConfig& config, ModelWeights weights, Backend* backend,
                const ModelOptions& options);
  absl::Status AllocateBuffers();
  absl::StatusOr<TensorView> NewTensor(DType dtype, std::initializer_list<int64_t> shape);

  ModelConfig config_;
  ModelWeights weights_;
  Backend* backend_;
  ModelOptions options_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<TensorView> kv_caches_;  // per layer [num_kv_blocks, block_size, kv_cache_dim]
  TensorView cos_sin_;                 // [max_model_len, rope_dim]
  MlaWorkspace mla_ws_;
  FfnWorkspace ffn_ws_;
  TensorView residual_, normed_, layer_out_;  // [max_num_tokens, hidden]
  TensorView logit_hidden_;                   // [max_num_seqs, hidden]
  TensorView logits_;                         // [max_num_seqs, vocab]
  std::unique_ptr<MlaAttention> attention_;
  std::unique_ptr<FeedForward> ffn_;
  uint64_t kv_cache_bytes_ = 0;
  uint64_t workspace_bytes_ = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_MODELS_DEEPSEEK_H_
