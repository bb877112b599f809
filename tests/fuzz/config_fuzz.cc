// Fuzzes ParseModelConfig (engine/config.h) with arbitrary text: every input must come back
// as a ModelConfig or an error Status, and an accepted config must satisfy the invariants the
// model code relies on, sizes whose products cannot overflow among them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<mlaserve::ModelConfig> config = mlaserve::ParseModelConfig(text);
  if (!config.ok()) return 0;
  FUZZ_CHECK(config->vocab_size > 0 && config->hidden_size > 0 && config->num_hidden_layers > 0);
  FUZZ_CHECK(config->num_attention_heads > 0 && config->max_position_embeddings > 0);
  FUZZ_CHECK(config->moe_layer_freq > 0 && config->n_group > 0);
  // What the model derives from it must not overflow (UBSan reports signed overflow).
  FUZZ_CHECK(config->qk_head_dim() > 0 && config->kv_cache_dim() > 0);
  FUZZ_CHECK(config->num_attention_heads * config->qk_head_dim() * config->hidden_size > 0);
  FUZZ_CHECK(config->vocab_size * config->hidden_size > 0);
  int64_t moe_layers = 0;
  for (int64_t layer = 0; layer < config->num_hidden_layers; ++layer) {
    moe_layers += config->IsMoeLayer(layer);
  }
  FUZZ_CHECK(moe_layers == 0 || config->n_routed_experts > 0);
  return 0;
}
