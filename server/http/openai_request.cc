#include "server/http/openai_request.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mlaserve/v1/inference.pb.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_fields.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
using openai_internal::Fields;
using openai_internal::Invalid;
using openai_internal::TokenIdList;

// The prompts of /v1/completions: a string, a list of strings, a list of token ids, or a list
// of lists of token ids.
absl::StatusOr<std::vector<v1::GenerateRequest>> CompletionPrompts(const Fields& f) {
  if (f.prompt == nullptr) return Invalid("prompt", "is required");
  const json& prompt = *f.prompt;
  std::vector<v1::GenerateRequest> prompts;
  const auto add_text = [&](const json& text) {
    prompts.push_back(f.proto);
    prompts.back().set_text(text.get<std::string>());
  };
  const auto add_ids = [&](const json& ids) {
    prompts.push_back(f.proto);
    return TokenIdList(ids, "prompt", prompts.back().mutable_token_ids()->mutable_ids());
  };
  if (prompt.is_string()) {
    add_text(prompt);
    return prompts;
  }
  if (!prompt.is_array() || prompt.empty()) {
    return Invalid("prompt", "must be a string, a list of strings or a list of token ids");
  }
  if (prompt.front().is_number()) {
    if (absl::Status s = add_ids(prompt); !s.ok()) return s;
    return prompts;
  }
  for (const json& item : prompt) {
    if (item.is_string()) {
      add_text(item);
    } else if (absl::Status s = add_ids(item); !s.ok()) {
      return s;
    }
  }
  return prompts;
}

// Content given as a list of parts becomes the text of its text parts, one per line.
absl::Status NormalizeMessages(json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return Invalid("messages", "must be a non-empty list of messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return Invalid(where, "must be an object with a string role");
    }
    if (!m.contains("content") || !m["content"].is_array()) continue;
    std::string text;
    for (size_t j = 0; j < m["content"].size(); ++j) {
      const json& part = m["content"][j];
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        return Invalid(absl::StrCat(where, ".content[", j, "]"), "only text parts are supported");
      }
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    m["content"] = text;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::GenerateRequest> ChatPrompt(Fields& f, const OpenAiModel& model) {
  if (f.messages.is_null()) return Invalid("messages", "is required");
  if (absl::Status s = NormalizeMessages(f.messages); !s.ok()) return s;
  if (model.chat_template == nullptr) {
    return absl::FailedPreconditionError(
        "messages: the model has no chat template (start the server with --chat_template=FILE)");
  }
  const absl::StatusOr<std::string> rendered =
      model.chat_template->Render({.messages = &f.messages,
                                   .tools = f.tools,
                                   .add_generation_prompt = f.add_generation_prompt,
                                   .extra = f.chat_template_kwargs});
  if (!rendered.ok()) {
    return Invalid("messages",
                   absl::StrCat("the chat template failed: ", rendered.status().message()));
  }
  if (absl::Status s = CheckTextSize(*rendered, model.limits.max_prompt_bytes, "messages");
      !s.ok()) {
    return s;
  }
  if (model.tokenizer == nullptr) return NoTokenizerError("messages");
  v1::GenerateRequest proto = f.proto;
  // The template writes the special tokens (bos) itself.
  for (int32_t id : model.tokenizer->Encode(*rendered, /*add_special_tokens=*/false)) {
    proto.mutable_token_ids()->add_ids(static_cast<uint32_t>(id));
  }
  return proto;
}

// The validator names proto fields; the client knows the OpenAI ones.
absl::Status RenameField(const absl::Status& status, const Fields& f,
                         const std::string& prompt_field) {
  const std::string_view message(status.message().data(), status.message().size());
  const std::pair<std::string_view, std::string_view> renames[] = {
      {"text", prompt_field},
      {"token_ids", prompt_field},
      {"max_tokens", f.max_tokens_field},
      {"top_logprobs", f.endpoint == OpenAiEndpoint::kCompletions ? "logprobs" : "top_logprobs"}};
  for (const auto& [from, to] : renames) {
    if (message.substr(0, from.size()) == from && message.size() > from.size() &&
        (message[from.size()] == ':' || message[from.size()] == '[')) {
      return absl::Status(status.code(),
                          std::string(to) + std::string(message.substr(from.size())));
    }
  }
  return status;
}

absl::StatusOr<OpenAiRequest> Parse(OpenAiEndpoint endpoint, std::string_view body,
                                    const OpenAiModel& model) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  Fields f;
  f.endpoint = endpoint;
  f.out.endpoint = endpoint;
  if (absl::Status s = openai_internal::ApplyFields(parsed, f); !s.ok()) return s;
  if (!f.out.model.empty() && f.out.model != model.name) {
    return absl::NotFoundError(absl::StrCat("model: the model `", f.out.model,
                                            "` does not exist (served: `", model.name, "`)"));
  }
  f.out.model = model.name;
  if (f.best_of != 0 && f.best_of != f.n) {
    return Invalid("best_of", "only best_of equal to n is supported");
  }
  if (f.out.include_usage && !f.out.stream) {
    return Invalid("stream_options", "needs stream: true");
  }
  if (endpoint == OpenAiEndpoint::kChatCompletions && f.proto.top_logprobs() > 0 &&
      !f.proto.return_logprobs()) {
    return Invalid("top_logprobs", "needs logprobs: true");
  }
  if (endpoint == OpenAiEndpoint::kCompletions && !f.proto.stopping().has_max_tokens()) {
    f.proto.mutable_stopping()->set_max_tokens(kDefaultCompletionMaxTokens);
  }
  std::vector<v1::GenerateRequest> prompts;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    absl::StatusOr<std::vector<v1::GenerateRequest>> p = CompletionPrompts(f);
    if (!p.ok()) return p.status();
    prompts = *std::move(p);
  } else {
    absl::StatusOr<v1::GenerateRequest> p = ChatPrompt(f, model);
    if (!p.ok()) return p.status();
    prompts.push_back(*std::move(p));
  }
  if (static_cast<int64_t>(prompts.size()) * f.n > kMaxOpenAiChoices) {
    return Invalid("n", absl::StrCat("n times the number of prompts is over the limit of ",
                                     kMaxOpenAiChoices));
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string prompt_field = endpoint == OpenAiEndpoint::kChatCompletions ? "messages"
                                     : prompts.size() == 1                        ? "prompt"
                                                           : absl::StrCat("prompt[", p, "]");
    absl::StatusOr<Request> request = ToEngineRequest(prompts[p], model.limits, model.tokenizer);
    if (!request.ok()) return RenameField(request.status(), f, prompt_field);
    for (int64_t i = 0; i < f.n; ++i) {
      f.out.choices.push_back(*request);
      std::optional<uint64_t>& seed = f.out.choices.back().sampling.seed;
      if (seed.has_value()) *seed += static_cast<uint64_t>(i);
    }
  }
  f.out.n = static_cast<int32_t>(f.n);
  return std::move(f.out);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                                 const OpenAiModel& model) {
  // Every access above checks the type first; this is the backstop for nlohmann's throws.
  try {
    return Parse(endpoint, body, model);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("body: ", e.what()));
  }
}

}  // namespace mlaserve
