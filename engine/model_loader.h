// Loads a Hugging Face DeepSeek model directory into a ready-to-run DeepseekModel.
#ifndef MLASERVE_ENGINE_MODEL_LOADER_H_
#define MLASERVE_ENGINE_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/deepseek.h"
#include "kernels/backend.h"

namespace mlaserve {

// Reads DIR/config.json and DIR's safetensors, checks them, copies the weights to `backend`
// and allocates the workspaces per `options` (max_model_len is clamped to the model's
// max_position_embeddings); ModelRunner::Create allocates the KV cache of
// options.num_kv_blocks. Errors name the file, field or tensor at fault.
absl::StatusOr<std::unique_ptr<DeepseekModel>> LoadDeepseekModel(const std::string& model_dir,
                                                                 Backend* backend,
                                                                 ModelOptions options);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_MODEL_LOADER_H_
