#include "engine/model_loader.h"

#include <algorithm>
#include <utility>

#include "engine/config.h"
#include "engine/model_weights.h"
#include "engine/status_macros.h"
#include "engine/weight_loader.h"

namespace mlaserve {

absl::StatusOr<std::unique_ptr<DeepseekModel>> LoadDeepseekModel(const std::string& model_dir,
                                                                 Backend* backend,
                                                                 ModelOptions options) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(model_dir));
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(config, *checkpoint, backend));
  options.max_model_len = std::min(options.max_model_len, config.max_position_embeddings);
  return DeepseekModel::Create(config, std::move(weights), backend, options);
}

}  // namespace mlaserve
