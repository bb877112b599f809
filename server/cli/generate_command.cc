#include "server/cli/generate_command.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/status_macros.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/engine_flags.h"

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

// --prompt_ids as given, or --prompt through the tokenizer (with bos as its config says).
absl::StatusOr<std::vector<int32_t>> PromptIdsFromFlags(int64_t vocab_size,
                                                        const Tokenizer* tokenizer) {
  const std::string ids = absl::GetFlag(FLAGS_prompt_ids);
  const std::string text = absl::GetFlag(FLAGS_prompt);
  if (!ids.empty() && !text.empty()) {
    return absl::InvalidArgumentError("--prompt and --prompt_ids: give only one");
  }
  if (!text.empty()) {
    if (tokenizer == nullptr) {
      return absl::FailedPreconditionError("--prompt: the model has no tokenizer.json");
    }
    return tokenizer->Encode(text, /*add_special_tokens=*/true);
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError("--prompt or --prompt_ids: give a prompt");
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
  std::string text;
  std::string finish_reason;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Runs the request through the same Engine as `serve`, alone.
absl::StatusOr<Generated> Generate(Engine& engine, std::vector<int32_t> prompt, int max_tokens) {
  Request request;
  request.prompt_token_ids = std::move(prompt);
  request.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  request.sampling.seed = absl::GetFlag(FLAGS_seed);
  request.stopping.max_tokens = max_tokens;
  request.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  request.top_logprobs = absl::GetFlag(FLAGS_top_logprobs);
  request.return_logprobs = true;
  ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.Submit(std::move(request)));
  Generated out;
  while (true) {
    StreamUpdate update = stream->WaitAndTake();
    for (TokenChoice& choice : update.logprobs) out.tokens.push_back(std::move(choice));
    out.text += update.text;
    if (!update.status.ok()) return update.status;
    if (!update.completion.has_value()) continue;
    const Completion& done = *update.completion;
    out.finish_reason = FinishReasonName(done.finish_reason);
    // Without a streamed token (eos first), the whole run counts as prefill.
    out.prefill_seconds = out.tokens.empty() ? done.e2e_seconds : done.time_to_first_token_seconds;
    out.decode_seconds = done.e2e_seconds - out.prefill_seconds;
    return out;
  }
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
      g.finish_reason.c_str(), prompt_tokens, g.tokens.size(), g.prefill_seconds, g.decode_seconds);
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
  ASSIGN_OR_RETURN(ModelOptions options, ModelOptionsFromFlags(backend->activation_dtype()));
  options.max_num_seqs = 1;
  ASSIGN_OR_RETURN(auto runner, ModelRunnerFromFlags(backend.get(), options));
  const int64_t vocab = runner->model().config().vocab_size;
  const std::string dir = ModelDirFromFlags();
  std::shared_ptr<const Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(dir));
  }
  EngineOptions engine_options;
  engine_options.scheduler.max_num_seqs = 1;
  engine_options.scheduler.max_num_batched_tokens = static_cast<int32_t>(options.max_num_tokens);
  engine_options.scheduler.max_model_len = static_cast<int32_t>(options.max_model_len);
  ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(std::move(runner), std::move(backend), tokenizer, std::move(engine_options)));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptIdsFromFlags(vocab, tokenizer.get()));
  const size_t prompt_tokens = prompt.size();
  ASSIGN_OR_RETURN(Generated g, Generate(*engine, std::move(prompt), max_tokens));
  if (output == "json") {
    PrintJson(g, prompt_tokens);
  } else if (tokenizer != nullptr) {
    std::printf("%s\n", g.text.c_str());
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
