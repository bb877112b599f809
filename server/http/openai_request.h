// OpenAI request bodies (POST /v1/completions, /v1/chat/completions) → engine Requests.
//
// The JSON is parsed with nlohmann-json and mapped field by field onto a v1::GenerateRequest,
// which then passes the one validator of the server (ToEngineRequest); its errors come back
// with the OpenAI field names ("prompt", "messages", "max_completion_tokens", "logprobs", ...).
// Rules that exist only in the OpenAI API (n, the shapes of prompt and messages, unsupported
// fields) are checked here. Every error is INVALID_ARGUMENT and starts with the field's name
// and ": ", except an unknown model, which is NOT_FOUND (HTTP 404), and a model without a
// tokenizer or chat template, FAILED_PRECONDITION (HTTP 400).
//
// Thread-safety: pure functions; the tokenizer and the chat template are only read.
#ifndef MLASERVE_SERVER_HTTP_OPENAI_REQUEST_H_
#define MLASERVE_SERVER_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/common/request_conversion.h"

namespace mlaserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

// Most choices one request may ask for (n times the number of prompts).
inline constexpr int kMaxOpenAiChoices = 128;
// OpenAI's default max_tokens of /v1/completions (chat has none: up to the context).
inline constexpr uint32_t kDefaultCompletionMaxTokens = 16;

// What parsing needs to know about the served model.
struct OpenAiModel {
  std::string name;  // the only `model` accepted
  ModelLimits limits;
  const Tokenizer* tokenizer = nullptr;         // null: only token-id prompts
  const ChatTemplate* chat_template = nullptr;  // null: chat is refused
};

// A validated request: the engine requests of its choices and how to answer them.
struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t n = 1;               // choices per prompt
  // One per choice, choice index order: prompt p's n samples are choices p*n .. p*n+n-1. Ids
  // are left empty (the server assigns them); with a seed, sample i draws with seed + i.
  std::vector<Request> choices;
};

// Parses and validates `body`. The chat template renders `messages` (with `tools`,
// `add_generation_prompt`, `chat_template_kwargs`), and the prompt is tokenized without
// adding special tokens again.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                                 const OpenAiModel& model);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_OPENAI_REQUEST_H_
