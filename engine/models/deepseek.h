// DeepseekModel: the DeepSeek-V2/V3 decoder (embedding, MLA + MoE/dense layers, final norm,
// lm_head) over one Backend. Every workspace is allocated once at creation for the largest
// step; the paged latent KV cache is allocated afterwards by AllocateKvCache, so that its size
// can be decided once everything else (decode graphs included) is in memory.
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
  int64_t num_kv_blocks = 0;           // including the reserved block 0 (see AllocateKvCache)
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

  // Bytes a KV cache of `num_blocks` blocks takes (every layer).
  uint64_t KvCacheBytes(int64_t num_blocks) const;
  // Allocates a KV cache of `num_blocks` (>= 2; block 0 is reserved and zeroed) blocks,
  // replacing the previous one: graphs captured over the previous cache must not be replayed.
  // Sets options().num_kv_blocks.
  absl::Status AllocateKvCache(int64_t num_blocks);

  // Runs one step. Returns logits [batch.num_logits, vocab] f32, valid until the next call.
  // REQUIRES: AllocateKvCache succeeded.
  TensorView Forward(const ForwardBatch& batch);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  // Bytes of the backend buffers the model holds, by use.
  uint64_t weight_bytes() const { return weights_.weight_bytes; }
  uint64_t kv_cache_bytes() const { return kv_cache_bytes_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }  // activations and rope table

 private:
  DeepseekModel(const ModelConfig& config, ModelWeights weights, Backend* backend,
                const ModelOptions& options);
  absl::Status AllocateWorkspaces();
  absl::StatusOr<TensorView> NewTensor(DType dtype, std::initializer_list<int64_t> shape);

  ModelConfig config_;
  ModelWeights weights_;
  Backend* backend_;
  ModelOptions options_;
  std::vector<DeviceBuffer> buffers_;     // workspaces
  std::vector<DeviceBuffer> kv_buffers_;  // the KV cache
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
