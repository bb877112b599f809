#include "engine/models/deepseek.h"

#include <algorithm>
#include <utility>

#include "engine/rope_cache.h"
#include "engine/status_macros.h"
#include "kernels/check.h"
#include "kernels/mla_split_plan.h"

namespace mlaserve {

absl::StatusOr<std::unique_ptr<DeepseekModel>> DeepseekModel::Create(const ModelConfig& config,
                                                                     ModelWeights weights,
                                                                     Backend* backend,
                                                                     const ModelOptions& options) {
  if (options.max_num_seqs > options.max_num_tokens) {
    return absl::InvalidArgumentError("max_num_seqs must not exceed max_num_batched_tokens");
  }
  std::unique_ptr<DeepseekModel> model(
      new DeepseekModel(config, std::move(weights), backend, options));
  RETURN_IF_ERROR(model->AllocateWorkspaces());
  return model;
}

DeepseekModel::DeepseekModel(const ModelConfig& config, ModelWeights weights, Backend* backend,
                             const ModelOptions& options)
    : config_(config), weights_(std::move(weights)), backend_(backend), options_(options) {}

absl::StatusOr<TensorView> DeepseekModel::NewTensor(DType dtype,
                                                    std::initializer_list<int64_t> shape) {
  TensorView probe(nullptr, dtype, shape);
  ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_->Allocate(static_cast<size_t>(probe.nbytes())));
  TensorView view(buffer.data(), dtype, shape);
  workspace_bytes_ += buffer.bytes();
  buffers_.push_back(std::move(buffer));
  return view;
}

ForwardLimits DeepseekModel::forward_limits() const {
  ForwardLimits l;
  l.max_num_tokens = options_.max_num_tokens;
  l.max_num_seqs = options_.max_num_seqs;
  l.block_size = options_.block_size;
  l.max_blocks_per_seq = (options_.max_model_len + options_.block_size - 1) / options_.block_size;
  l.context_chunk_tokens = options_.context_chunk_tokens;
  l.max_context_rounds =
      (options_.max_num_seqs * options_.max_model_len + options_.context_chunk_tokens - 1) /
      options_.context_chunk_tokens;
  l.mla_split_workers = backend_->mla_decode_split_workers(config_.num_attention_heads);
  l.mla_split_rule = MlaSplitRuleFor(backend_->batch_invariant());
  return l;
}

absl::Status DeepseekModel::AllocateWorkspaces() {
  const ModelConfig& c = config_;
  const DType f32 = DType::kF32;
  const int64_t rows = options_.max_num_tokens, seqs = options_.max_num_seqs;
  const int64_t heads = c.num_attention_heads, hidden = c.hidden_size;
  const int64_t ctx = options_.context_chunk_tokens;
  const int64_t kv_row = heads * (c.qk_nope_head_dim + c.v_head_dim);

  // Rope table: the only buffer filled at start-up, since it is constant.
  const std::vector<float> table = ComputeRopeCosSin(c, options_.max_model_len);
  ASSIGN_OR_RETURN(cos_sin_, (NewTensor(f32, {options_.max_model_len, c.qk_rope_head_dim})));
  backend_->CopyFromHost(table.data(), table.size() * sizeof(float), cos_sin_);

  MlaWorkspace& m = mla_ws_;
  if (c.q_lora_rank > 0) {
    ASSIGN_OR_RETURN(m.q_a, (NewTensor(f32, {rows, c.q_lora_rank})));
  }
  ASSIGN_OR_RETURN(m.q, (NewTensor(f32, {rows, heads, c.qk_head_dim()})));
  ASSIGN_OR_RETURN(m.kv_a, (NewTensor(f32, {rows, c.kv_cache_dim()})));
  ASSIGN_OR_RETURN(m.latent, (NewTensor(f32, {rows, c.kv_lora_rank})));
  ASSIGN_OR_RETURN(m.q_latent, (NewTensor(f32, {seqs, heads, c.kv_lora_rank})));
  ASSIGN_OR_RETURN(m.attn_latent, (NewTensor(f32, {seqs, heads, c.kv_lora_rank})));
  ASSIGN_OR_RETURN(m.kv, (NewTensor(f32, {rows, kv_row})));
  ASSIGN_OR_RETURN(m.lse, (NewTensor(f32, {rows, heads})));
  ASSIGN_OR_RETURN(m.ctx_latent, (NewTensor(f32, {ctx, c.kv_cache_dim()})));
  ASSIGN_OR_RETURN(m.ctx_kv, (NewTensor(f32, {ctx, kv_row})));
  ASSIGN_OR_RETURN(m.round_out, (NewTensor(f32, {rows, heads, c.v_head_dim})));
  ASSIGN_OR_RETURN(m.round_lse, (NewTensor(f32, {rows, heads})));
  ASSIGN_OR_RETURN(m.attn_out, (NewTensor(f32, {rows, heads * c.v_head_dim})));
  // As many partial results as the step's split-KV plan can hold (the same limits size it).
  if (const ForwardLimits l = forward_limits(); l.mla_split_workers > 0) {
    const int64_t items = MlaSplitCapacity(seqs, l.mla_split_workers, l.mla_split_rule);
    ASSIGN_OR_RETURN(m.split_out, (NewTensor(f32, {items, heads, c.kv_lora_rank})));
    ASSIGN_OR_RETURN(m.split_lse, (NewTensor(f32, {items, heads})));
  }

  FfnWorkspace& f = ffn_ws_;
  const int64_t shared_inter = c.moe_intermediate_size * c.n_shared_experts;
  const int64_t inter = std::max(c.intermediate_size, shared_inter);
  ASSIGN_OR_RETURN(f.gate_up, (NewTensor(f32, {rows, 2 * inter})));
  ASSIGN_OR_RETURN(f.act, (NewTensor(f32, {rows, inter})));
  ASSIGN_OR_RETURN(f.shared_out, (NewTensor(f32, {rows, hidden})));
  if (c.n_routed_experts > 0) {
    const int64_t e = c.n_routed_experts, k = c.num_experts_per_tok;
    const int64_t padded = rows * k + e * (kMoeAlignBlock - 1);
    ASSIGN_OR_RETURN(f.router_logits, (NewTensor(f32, {rows, e})));
    ASSIGN_OR_RETURN(f.topk_ids, (NewTensor(DType::kI32, {rows, k})));
    ASSIGN_OR_RETURN(f.topk_weights, (NewTensor(f32, {rows, k})));
    ASSIGN_OR_RETURN(f.sorted_ids, (NewTensor(DType::kI32, {padded})));
    ASSIGN_OR_RETURN(f.block_expert_ids,
                     (NewTensor(DType::kI32, {(padded + kMoeAlignBlock - 1) / kMoeAlignBlock})));
    ASSIGN_OR_RETURN(f.expert_offsets, (NewTensor(DType::kI32, {e + 1})));
    ASSIGN_OR_RETURN(f.num_post_pad, (NewTensor(DType::kI32, {1})));
    ASSIGN_OR_RETURN(f.expert_gate_up, (NewTensor(f32, {padded, 2 * c.moe_intermediate_size})));
    ASSIGN_OR_RETURN(f.expert_act, (NewTensor(f32, {padded, c.moe_intermediate_size})));
    ASSIGN_OR_RETURN(f.expert_down, (NewTensor(f32, {padded, hidden})));
  }
  ASSIGN_OR_RETURN(residual_, (NewTensor(f32, {rows, hidden})));
  ASSIGN_OR_RETURN(normed_, (NewTensor(f32, {rows, hidden})));
  ASSIGN_OR_RETURN(layer_out_, (NewTensor(f32, {rows, hidden})));
  ASSIGN_OR_RETURN(logit_hidden_, (NewTensor(f32, {seqs, hidden})));
  ASSIGN_OR_RETURN(logits_, (NewTensor(f32, {seqs, c.vocab_size})));

  attention_ = std::make_unique<MlaAttention>(config_, backend_, cos_sin_,
                                              AttentionSoftmaxScale(config_));
  ffn_ = std::make_unique<FeedForward>(config_, backend_);
  return absl::OkStatus();
}

uint64_t DeepseekModel::KvCacheBytes(int64_t num_blocks) const {
  const TensorView layer(nullptr, options_.kv_cache_dtype,
                         {num_blocks, options_.block_size, config_.kv_cache_dim()});
  return static_cast<uint64_t>(layer.nbytes()) * static_cast<uint64_t>(config_.num_hidden_layers);
}

absl::Status DeepseekModel::AllocateKvCache(int64_t num_blocks) {
  if (num_blocks < 2) {
    return absl::InvalidArgumentError("num_kv_blocks must be at least 2 (block 0 is reserved)");
  }
  kv_caches_.clear();
  kv_buffers_.clear();
  kv_cache_bytes_ = 0;
  options_.num_kv_blocks = num_blocks;
  // Block 0 is reserved for padded graph rows, which attend over its first row: it is the one
  // part of the cache that must hold defined (zero) values.
  const TensorView block(nullptr, options_.kv_cache_dtype,
                         {options_.block_size, config_.kv_cache_dim()});
  const std::vector<char> zeros(static_cast<size_t>(block.nbytes()), 0);
  const uint64_t layer_bytes = KvCacheBytes(num_blocks) / config_.num_hidden_layers;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer buffer, backend_->Allocate(layer_bytes));
    const TensorView cache(buffer.data(), options_.kv_cache_dtype,
                           {num_blocks, options_.block_size, config_.kv_cache_dim()});
    backend_->CopyFromHost(zeros.data(), zeros.size(), cache.Slice(0, 0, 1));
    kv_caches_.push_back(cache);
    kv_cache_bytes_ += buffer.bytes();
    kv_buffers_.push_back(std::move(buffer));
  }
  return absl::OkStatus();
}

TensorView DeepseekModel::Forward(const ForwardBatch& fb) {
  MLASERVE_CHECK(!kv_caches_.empty());
  const int64_t t = fb.num_tokens;
  Backend& b = *backend_;
  const TensorView residual = residual_.Slice(0, 0, t), normed = normed_.Slice(0, 0, t),
                   out = layer_out_.Slice(0, 0, t);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  b.Embedding({.ids = fb.input_ids, .table = weights_.embed, .out = residual});
  b.RmsNorm({.x = residual, .weight = weights_.layers[0].input_norm, .eps = eps, .out = normed});
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const LayerWeights& w = weights_.layers[i];
    attention_->Forward(w, fb, normed, kv_caches_[i], mla_ws_, out);
    b.RmsNorm({.x = out, .residual = residual, .weight = w.post_attention_norm, .eps = eps,
               .out = normed});
    const TensorView shared = ffn_->Forward(w, t, fb.num_decodes, normed, ffn_ws_, out);
    const TensorView& next_norm =
        i + 1 < weights_.layers.size() ? weights_.layers[i + 1].input_norm : weights_.final_norm;
    b.RmsNorm({.x = out, .residual = residual, .addend = shared, .weight = next_norm, .eps = eps,
               .out = normed});
  }
  const TensorView hidden = logit_hidden_.Slice(0, 0, fb.num_logits);
  const TensorView logits = logits_.Slice(0, 0, fb.num_logits);
  if (fb.num_logits > 0) {
    b.Embedding({.ids = fb.logits_indices, .table = normed, .out = hidden});
    b.Gemm({.a = hidden, .b = weights_.lm_head, .out = logits, .decode_rows = fb.num_decode_logits});
  }
  return logits;
}

}  // namespace mlaserve
