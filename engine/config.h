// ModelConfig: a validated DeepSeek-V2 / V2-Lite / V3 config.json (model_type deepseek_v2 or
// deepseek_v3, and fine-tunes that keep it). Parsing checks every field it reads and names the
// offending field in the error; values the engine cannot run are refused, never ignored.
#ifndef MLASERVE_ENGINE_CONFIG_H_
#define MLASERVE_ENGINE_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/params.h"

namespace mlaserve {

enum class RopeScalingType : uint8_t { kNone, kLinear, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // yarn
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  double mscale = 1.0;                           // yarn
  double mscale_all_dim = 0.0;                   // yarn
};

struct ModelConfig {
  std::string model_type;  // "deepseek_v2" or "deepseek_v3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense MLP
  int64_t moe_intermediate_size = 0;  // each routed / shared expert
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;

  // MLA
  int64_t q_lora_rank = 0;  // 0 when config.json has null: q_proj is a plain projection
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;

  // MoE
  int64_t n_routed_experts = 0;  // 0: every layer is dense
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  MoeTopkMethod topk_method = MoeTopkMethod::kGreedy;
  MoeScoring scoring_func = MoeScoring::kSoftmax;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;

  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;               // -1 when absent
  std::vector<int64_t> eos_token_ids;      // config.json eos_token_id (int or list)
  std::string torch_dtype;                 // as written, informational

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t kv_cache_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // DeepSeek's rule: layer i is MoE iff experts exist, i >= first_k_dense_replace and
  // i % moe_layer_freq == 0.
  bool IsMoeLayer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // V3 multiplies routed weights by routed_scaling_factor always; V2 only when not normalised.
  bool ScaleRoutedWeightsAlways() const { return model_type == "deepseek_v3"; }
};

// Parses and validates the text of a config.json.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text);
// Reads DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_CONFIG_H_
