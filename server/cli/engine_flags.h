// Flags shared by `mlaserve serve` and `mlaserve generate` (see docs/cli.md), and their
// translation into engine options. Every value is validated here; errors name the flag.
#ifndef MLASERVE_SERVER_CLI_ENGINE_FLAGS_H_
#define MLASERVE_SERVER_CLI_ENGINE_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "engine/model_runner.h"
#include "engine/models/deepseek.h"
#include "kernels/backend.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(int, max_num_seqs);
ABSL_DECLARE_FLAG(int, max_num_batched_tokens);
ABSL_DECLARE_FLAG(int, block_size);
ABSL_DECLARE_FLAG(int, kv_cache_tokens);
ABSL_DECLARE_FLAG(std::string, kv_cache_dtype);
ABSL_DECLARE_FLAG(int, max_model_len);
ABSL_DECLARE_FLAG(std::string, graph_batch_sizes);

namespace mlaserve {

// --model, or the embedded default model when it is empty.
std::string ModelDirFromFlags();

// Model options from the flags (max_model_len is clamped to the model later); the KV cache's
// dtype is `activation_dtype` (the backend's, Backend::activation_dtype) unless
// --kv_cache_dtype names one.
absl::StatusOr<ModelOptions> ModelOptionsFromFlags(DType activation_dtype);

// Decode-graph buckets from --graph_batch_sizes (errors name the flag).
absl::StatusOr<std::vector<int32_t>> GraphBucketsFromFlags(int32_t max_num_seqs);

// The backend the flags ask for.
absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags();

// Loads the --model directory onto `backend` per `options` and creates its runner with the
// --graph_batch_sizes graphs (for options.max_num_seqs); a KV cache too large for the
// backend's memory is refused naming --kv_cache_tokens.
absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunnerFromFlags(Backend* backend,
                                                                  const ModelOptions& options);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_ENGINE_FLAGS_H_
