// Engine output → OpenAI response objects (text_completion, chat.completion and their stream
// chunks, usage, errors) and Server-Sent Events framing.
//
// Thread-safety: pure functions; the tokenizer is only read.
#ifndef MLASERVE_SERVER_HTTP_OPENAI_RESPONSE_H_
#define MLASERVE_SERVER_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/request_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_request.h"

namespace mlaserve {

// What every object of one response shares.
struct OpenAiResponseHeader {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  const Tokenizer* tokenizer = nullptr;  // token strings of logprobs; null: "token_id:N"
};

// Output of one choice, accumulated or as one stream delta.
struct ChoiceOutput {
  std::string text;
  std::vector<TokenChoice> logprobs;  // empty unless the request asked for them
};

// "stop", "length" or "abort" (OpenAI knows the first two; vLLM also sends "abort").
const char* OpenAiFinishReason(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::json Usage(int64_t prompt_tokens, int64_t completion_tokens);

// The logprobs object of a choice: chat {"content": [{token, logprob, bytes, top_logprobs}]},
// completions {tokens, token_logprobs, top_logprobs, text_offset}; null when `output` has none.
// `text_offset` starts at `offset`, the choice's text length before this output.
nlohmann::json Logprobs(const OpenAiResponseHeader& h, const ChoiceOutput& output, int64_t offset);

// One element of "choices": chat {index, message|delta, logprobs, finish_reason},
// completions {index, text, logprobs, finish_reason}. `finish` is null while streaming.
nlohmann::json Choice(const OpenAiResponseHeader& h, int index, const ChoiceOutput& output,
                      int64_t offset, bool delta, const nlohmann::json& finish);

// The whole non-streamed response ("text_completion" / "chat.completion").
nlohmann::json Response(const OpenAiResponseHeader& h, nlohmann::json choices,
                        nlohmann::json usage);

// One stream chunk ("text_completion" / "chat.completion.chunk"). With include_usage every
// chunk carries "usage": null and the last one (empty choices) the usage.
nlohmann::json Chunk(const OpenAiResponseHeader& h, nlohmann::json choices, bool include_usage,
                     nlohmann::json usage = nullptr);

// OpenAI's error object {"error": {"message", "type", "param", "code"}}; `param` is the field
// the message starts with ("top_p: ..."), or null.
nlohmann::json ErrorBody(const absl::Status& status);
// The HTTP status of an error: 400, 404, 413, 429, 503, 500.
int HttpStatus(const absl::Status& status);

// "data: <json>\n\n"; non-UTF-8 text is replaced, never thrown on.
std::string SseEvent(const nlohmann::json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// JSON text that never throws (invalid UTF-8 replaced).
std::string Dump(const nlohmann::json& value);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_OPENAI_RESPONSE_H_
