#include "server/generate_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/status_macros.h"
#include "server/engine_flags.h"

ABSL_FLAG(std::string, prompt, "", "prompt text (tokenized with the model's tokenizer)");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids, used as given");
ABSL_FLAG(int, max_tokens, 64, "tokens to generate at most");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(uint64_t, seed, 0, "seed of the sampler");
ABSL_FLAG(int, top_logprobs, 0, "alternatives per token in --output=json (at most 20)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence tokens");
ABSL_FLAG(std::string, output, "text", "text | json");

namespace mlaserve {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::vector<int32_t>> PromptIdsFromFlags(int64_t vocab_size) {
  const std::string ids = absl::GetFlag(FLAGS_prompt_ids);
  if (ids.empty()) {
    return absl::InvalidArgumentError("--prompt_ids: give the prompt as token ids");
  }
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(ids, ',')) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt_ids: \"", std::string(part),
                                                     "\" is not a token id below ", vocab_size));
    }
    out.push_back(id);
  }
  return out;
}

struct Generated {
  std::vector<TokenChoice> tokens;
  std::string finish_reason;
  double prefill_seconds = 0, decode_seconds = 0;
};

absl::StatusOr<Generated> Generate(ModelRunner& runner, std::vector<int32_t> tokens,
                                   int max_tokens) {
  const ModelConfig& config = runner.model().config();
  const ModelOptions& options = runner.model().options();
  const int64_t prompt_len = static_cast<int64_t>(tokens.size());
  const int64_t limit = std::min<int64_t>(prompt_len + max_tokens, options.max_model_len);
  if (prompt_len >= options.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt_len,
                                                   " tokens; the context limit is ",
                                                   options.max_model_len));
  }
  const int64_t blocks_needed = (limit + options.block_size - 1) / options.block_size;
  if (blocks_needed > options.num_kv_blocks - 1) {
    return absl::ResourceExhaustedError("--kv_cache_tokens is too small for this request");
  }
  std::vector<int32_t> table(static_cast<size_t>(blocks_needed));
  std::iota(table.begin(), table.end(), 1);  // block 0 is reserved

  SamplingOptions sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int top_logprobs = absl::GetFlag(FLAGS_top_logprobs);
  const bool ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  SamplerScratch scratch;
  StepLogits logits;
  Generated out;
  int32_t computed = 0;
  const auto start = Clock::now();
  auto first_token = start;
  while (true) {
    const int32_t n = std::min<int32_t>(static_cast<int32_t>(tokens.size()) - computed,
                                        static_cast<int32_t>(options.max_num_tokens));
    const bool last = computed + n == static_cast<int32_t>(tokens.size());
    const StepSequence step{.token_ids = tokens, .start_position = computed,
                            .num_new_tokens = n, .block_table = table, .needs_logits = last};
    RETURN_IF_ERROR(runner.Execute({step}, &logits));
    computed += n;
    if (!last) continue;
    const absl::Span<const int32_t> prompt(tokens.data(), static_cast<size_t>(prompt_len));
    const absl::Span<const int32_t> output(tokens.data() + prompt_len,
                                           tokens.size() - static_cast<size_t>(prompt_len));
    TokenChoice choice = SampleToken(logits.row(0), sampling, prompt, output, seed, top_logprobs,
                                     scratch);
    if (out.tokens.empty()) first_token = Clock::now();
    const auto& eos = config.eos_token_ids;
    if (!ignore_eos && std::find(eos.begin(), eos.end(), choice.token) != eos.end()) {
      out.finish_reason = "stop";
      break;
    }
    tokens.push_back(choice.token);
    out.tokens.push_back(std::move(choice));
    if (static_cast<int64_t>(tokens.size()) >= limit) {
      out.finish_reason = "length";
      break;
    }
  }
  const auto end = Clock::now();
  out.prefill_seconds = std::chrono::duration<double>(first_token - start).count();
  out.decode_seconds = std::chrono::duration<double>(end - first_token).count();
  return out;
}

void PrintJson(const Generated& g, size_t prompt_tokens) {
  for (const TokenChoice& t : g.tokens) {
    std::string line = absl::StrCat("{\"id\":", t.token, ",\"logprob\":", t.logprob, ",\"top\":[");
    for (size_t i = 0; i < t.top.size(); ++i) {
      absl::StrAppend(&line, i ? "," : "", "[", t.top[i].first, ",", t.top[i].second, "]");
    }
    std::printf("%s]}\n", line.c_str());
  }
  std::printf(
      "{\"finish_reason\":\"%s\",\"prompt_tokens\":%zu,\"completion_tokens\":%zu,"
      "\"prefill_seconds\":%.6f,\"decode_seconds\":%.6f}\n",
      g.finish_reason.c_str(), prompt_tokens, g.tokens.size(), g.prefill_seconds,
      g.decode_seconds);
}

absl::Status Run() {
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "text" && output != "json") {
    return absl::InvalidArgumentError("--output: must be text or json");
  }
  const int top_logprobs = absl::GetFlag(FLAGS_top_logprobs);
  if (top_logprobs < 0 || top_logprobs > 20) {
    return absl::InvalidArgumentError("--top_logprobs: must be in [0, 20]");
  }
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (max_tokens <= 0) return absl::InvalidArgumentError("--max_tokens: must be positive");
  if (absl::GetFlag(FLAGS_temperature) < 0) {
    return absl::InvalidArgumentError("--temperature: must not be negative");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, BackendFromFlags());
  ASSIGN_OR_RETURN(ModelOptions options, ModelOptionsFromFlags());
  options.max_num_seqs = 1;
  ASSIGN_OR_RETURN(auto model, LoadDeepseekModel(ModelDirFromFlags(), backend.get(), options));
  const int64_t vocab = model->config().vocab_size;
  ASSIGN_OR_RETURN(std::vector<int32_t> buckets, GraphBucketsFromFlags(1));
  ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(std::move(model), backend.get(), buckets));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptIdsFromFlags(vocab));
  const size_t prompt_tokens = prompt.size();
  ASSIGN_OR_RETURN(Generated g, Generate(*runner, std::move(prompt), max_tokens));
  if (output == "json") {
    PrintJson(g, prompt_tokens);
  } else {
    std::string ids;
    for (const TokenChoice& t : g.tokens) absl::StrAppend(&ids, ids.empty() ? "" : " ", t.token);
    std::printf("%s\n", ids.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int RunGenerateCommand() {
  const absl::Status s = Run();
  if (s.ok()) return 0;
  std::fprintf(stderr, "mlaserve generate: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace mlaserve
