// Fuzzes ParseOpenAiRequest (server/http/openai_request.h), the parser of OpenAI request
// bodies, and the error objects made of its errors. The first byte picks the endpoint
// (completions or chat); the rest is the body. Every input must come back as a request or an
// error Status of the documented codes whose message names a field; an accepted request must
// obey the model limits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const mlaserve::OpenAiModel& Model() {
  static const mlaserve::OpenAiModel* const model = [] {
    auto tokenizer =
        mlaserve::Tokenizer::Load(MLASERVE_SOURCE_DIR "/tests/server/data/tiny_tokenizer");
    FUZZ_CHECK(tokenizer.ok());
    auto chat_template = mlaserve::ChatTemplate::Compile(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}",
        "<s>", "</s>");
    FUZZ_CHECK(chat_template.ok());
    return new mlaserve::OpenAiModel{
        .name = "tiny",
        .limits = {.vocab_size = 256, .max_context_tokens = 64, .max_prompt_bytes = 4096},
        .tokenizer = tokenizer->release(),
        .chat_template = new mlaserve::ChatTemplate(*std::move(chat_template))};
  }();
  return *model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const mlaserve::OpenAiEndpoint endpoint = data[0] % 2 == 0
                                                ? mlaserve::OpenAiEndpoint::kCompletions
                                                : mlaserve::OpenAiEndpoint::kChatCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const mlaserve::OpenAiModel& model = Model();
  absl::StatusOr<mlaserve::OpenAiRequest> request =
      mlaserve::ParseOpenAiRequest(endpoint, body, model);
  if (!request.ok()) {
    const absl::StatusCode code = request.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
               code == absl::StatusCode::kFailedPrecondition);
    // Every refusal names the field the client must fix (an unknown key may be any string).
    const std::string message(request.status().message());
    FUZZ_CHECK(!mlaserve::ErrorBody(request.status())["error"]["param"].is_null() ||
               message.ends_with(": unknown field"));
    return 0;
  }
  FUZZ_CHECK(!request->choices.empty());
  FUZZ_CHECK(static_cast<int>(request->choices.size()) <= mlaserve::kMaxOpenAiChoices);
  for (const mlaserve::Request& choice : request->choices) {
    FUZZ_CHECK(!choice.prompt_token_ids.empty());
    FUZZ_CHECK(static_cast<int32_t>(choice.prompt_token_ids.size()) <
               model.limits.max_context_tokens);
    for (int32_t id : choice.prompt_token_ids) FUZZ_CHECK(id >= 0 && id < model.limits.vocab_size);
    FUZZ_CHECK(!choice.stopping.max_tokens.has_value() || *choice.stopping.max_tokens > 0);
    FUZZ_CHECK(choice.top_logprobs <= static_cast<int32_t>(mlaserve::kMaxTopLogprobs));
  }
  return 0;
}
