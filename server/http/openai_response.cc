#include "server/http/openai_response.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

bool IsChat(const OpenAiResponseHeader& h) {
  return h.endpoint == OpenAiEndpoint::kChatCompletions;
}

std::string TokenText(const OpenAiResponseHeader& h, int32_t id) {
  if (h.tokenizer == nullptr) return absl::StrCat("token_id:", id);
  return h.tokenizer->Decode({id}, /*skip_special_tokens=*/false);
}

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int{c});
  return bytes;
}

json ChatLogprobs(const OpenAiResponseHeader& h, const ChoiceOutput& output) {
  json content = json::array();
  for (const TokenChoice& choice : output.logprobs) {
    const std::string token = TokenText(h, choice.token);
    json top = json::array();
    for (const auto& [id, logprob] : choice.top) {
      const std::string alternative = TokenText(h, id);
      top.push_back({{"token", alternative}, {"logprob", logprob}, {"bytes", Bytes(alternative)}});
    }
    content.push_back({{"token", token},
                       {"logprob", choice.logprob},
                       {"bytes", Bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json CompletionLogprobs(const OpenAiResponseHeader& h, const ChoiceOutput& output, int64_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const TokenChoice& choice : output.logprobs) {
    const std::string token = TokenText(h, choice.token);
    tokens.push_back(token);
    token_logprobs.push_back(choice.logprob);
    json top = json::object();
    for (const auto& [id, logprob] : choice.top) top[TokenText(h, id)] = logprob;
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += static_cast<int64_t>(token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

// The field a message names first: "top_p: 3 is outside (0, 1]", "prompt[2] = 300 is not a
// token id ..."; empty when it names none.
std::string FieldOf(const std::string& message) {
  const size_t end = message.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
  if (end == 0 || end == std::string::npos) return "";
  const std::string_view rest = std::string_view(message).substr(end);
  if (rest.substr(0, 2) != ": " && rest.substr(0, 3) != " = ") return "";
  return message.substr(0, end);
}

}  // namespace

const char* OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
    case FinishReason::kDeadline:
    case FinishReason::kNone:
      break;
  }
  return "abort";
}

json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json Logprobs(const OpenAiResponseHeader& h, const ChoiceOutput& output, int64_t offset) {
  if (output.logprobs.empty()) return nullptr;
  return IsChat(h) ? ChatLogprobs(h, output) : CompletionLogprobs(h, output, offset);
}

json Choice(const OpenAiResponseHeader& h, int index, const ChoiceOutput& output, int64_t offset,
            bool delta, const json& finish) {
  json choice = {{"index", index}};
  if (IsChat(h)) {
    json message = json::object();
    if (!delta) {
      message = {{"role", "assistant"}, {"content", output.text}};
    } else if (!output.text.empty()) {
      message["content"] = output.text;
    }
    choice[delta ? "delta" : "message"] = std::move(message);
  } else {
    choice["text"] = output.text;
  }
  choice["logprobs"] = Logprobs(h, output, offset);
  choice["finish_reason"] = finish;
  return choice;
}

json Response(const OpenAiResponseHeader& h, json choices, json usage) {
  return {{"id", h.id},
          {"object", IsChat(h) ? "chat.completion" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)},
          {"usage", std::move(usage)}};
}

json Chunk(const OpenAiResponseHeader& h, json choices, bool include_usage, json usage) {
  json chunk = {{"id", h.id},
                {"object", IsChat(h) ? "chat.completion.chunk" : "text_completion"},
                {"created", h.created},
                {"model", h.model},
                {"choices", std::move(choices)}};
  if (include_usage) chunk["usage"] = std::move(usage);
  return chunk;
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    default:
      return 500;
  }
}

json ErrorBody(const absl::Status& status) {
  const std::string message(status.message());
  json param = nullptr;
  if (const std::string field = FieldOf(message); !field.empty()) param = field;
  const int http = HttpStatus(status);
  const char* type = http == 429   ? "rate_limit_error"
                     : http == 404 ? "not_found_error"
                     : http == 503 ? "service_unavailable_error"
                     : http >= 500 ? "server_error"
                                   : "invalid_request_error";
  const char* code = http == 404 && param == "model" ? "model_not_found" : nullptr;
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", std::move(param)},
            {"code", code == nullptr ? json(nullptr) : json(code)}}}};
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseEvent(const json& data) { return absl::StrCat("data: ", Dump(data), "\n\n"); }

}  // namespace mlaserve
