#include "server/cli/engine_flags.h"

#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "engine/graph_runner.h"
#include "engine/model_loader.h"
#include "engine/status_macros.h"
#include "server/cli/backend_selection.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face model directory (config.json, *.safetensors, tokenizer.json); empty: the "
          "embedded default model");
ABSL_FLAG(std::string, backend, "auto", "auto | cpu | cuda | ref (the slow oracle)");
ABSL_FLAG(int, threads, 0,
          "CPU worker threads (0 = all cores the process may use: its affinity mask, capped by "
          "its cgroup's CPU limit)");
ABSL_FLAG(std::string, dtype, "float32",
          "activation dtype: float32 (matches the reference within 1e-3 logprob) or bfloat16 "
          "(GEMM inputs rounded to bf16 against bf16 weights: faster prompts where the CPU has "
          "AVX512_BF16; weights keep their stored dtype)");
ABSL_FLAG(bool, deterministic, true,
          "batch-invariant kernels: greedy and seeded results (tokens and logprobs) do not "
          "depend on what else is batched");
ABSL_FLAG(int, max_num_seqs, 64, "most sequences in one step");
ABSL_FLAG(int, max_num_batched_tokens, 2048, "most tokens in one step (prefill chunk budget)");
ABSL_FLAG(int, block_size, 64, "tokens per KV-cache block");
ABSL_FLAG(int, kv_cache_tokens, 65536, "tokens the paged KV cache holds");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "dtype of the cached latents: auto (bfloat16 with --dtype=bfloat16, else float32), "
          "float32 or bfloat16 (half the bytes per token, each latent rounded to bf16)");
ABSL_FLAG(int, max_model_len, 0, "context limit in tokens (0 = the model's)");
ABSL_FLAG(std::string, graph_batch_sizes, "",
          "decode batch sizes captured as graphs: \"\" = 1,2,4,8 then every 8 up to "
          "max_num_seqs; \"none\" = eager only; or a list such as 1,2,4");

namespace mlaserve {
namespace {

absl::Status Positive(const char* name, int value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", name, " must be positive, got ", value));
}

}  // namespace

std::string ModelDirFromFlags() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  return dir.empty() ? std::string(MLASERVE_DEFAULT_MODEL_DIR) : dir;
}

absl::StatusOr<ModelOptions> ModelOptionsFromFlags(DType activation_dtype) {
  ModelOptions o;
  const int seqs = absl::GetFlag(FLAGS_max_num_seqs);
  const int tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  const int block = absl::GetFlag(FLAGS_block_size);
  const int kv_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  const int max_len = absl::GetFlag(FLAGS_max_model_len);
  for (auto [name, value] : {std::pair{"max_num_seqs", seqs},
                             {"max_num_batched_tokens", tokens},
                             {"block_size", block},
                             {"kv_cache_tokens", kv_tokens}}) {
    if (absl::Status s = Positive(name, value); !s.ok()) return s;
  }
  if (max_len < 0) return absl::InvalidArgumentError("--max_model_len must not be negative");
  if (seqs > tokens) {
    return absl::InvalidArgumentError("--max_num_seqs must not exceed --max_num_batched_tokens");
  }
  o.max_num_seqs = seqs;
  o.max_num_tokens = tokens;
  o.block_size = block;
  o.num_kv_blocks = 1 + (kv_tokens + block - 1) / block;
  o.max_model_len = max_len > 0 ? max_len : (int64_t{1} << 30);
  const std::string cache = absl::GetFlag(FLAGS_kv_cache_dtype);
  const std::optional<DType> dtype = KvCacheDTypeFromName(cache, activation_dtype);
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_cache_dtype: unknown value \"", cache, "\" (auto, float32 or bfloat16)"));
  }
  o.kv_cache_dtype = *dtype;
  return o;
}

absl::StatusOr<std::vector<int32_t>> GraphBucketsFromFlags(int32_t max_num_seqs) {
  return ParseGraphBuckets(absl::GetFlag(FLAGS_graph_batch_sizes), max_num_seqs);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunnerFromFlags(Backend* backend,
                                                                  const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<DeepseekModel> model,
                   LoadDeepseekModel(ModelDirFromFlags(), backend, options));
  ASSIGN_OR_RETURN(std::vector<int32_t> buckets,
                   GraphBucketsFromFlags(static_cast<int32_t>(options.max_num_seqs)));
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(std::move(model), backend, buckets);
  if (absl::IsResourceExhausted(runner.status())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--kv_cache_tokens=", absl::GetFlag(FLAGS_kv_cache_tokens), ": ",
                     runner.status().message()));
  }
  return runner;
}

absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags() {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return absl::InvalidArgumentError("--threads must not be negative");
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const std::optional<DType> activation = ActivationDTypeFromName(dtype);
  if (!activation.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: unknown value \"", dtype, "\" (float32 or bfloat16)"));
  }
  return CreateBackend(absl::GetFlag(FLAGS_backend), threads, absl::GetFlag(FLAGS_deterministic),
                       *activation);
}

}  // namespace mlaserve
