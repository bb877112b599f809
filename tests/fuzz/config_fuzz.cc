// Fuzzes ParseModelConfig (engine/config.h) with arbitrary text: every input must come back
// as a ModelConfig or an error Status, and an accepted config must satisfy the invariants the
// model code relies on.
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
  return 0;
}
