#include "server/common/request_conversion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

absl::Status Invalid(const char* field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Copies `ids` into `out`, refusing any id outside [0, vocab_size) and any id that does not
// fit in int32 (engine ids are int32 whatever the vocabulary size claims).
template <typename Ids>
absl::Status CheckTokenIds(const Ids& ids, int64_t vocab_size, const char* field,
                           std::vector<int32_t>* out) {
  const int64_t limit =
      std::min<int64_t>(vocab_size, int64_t{std::numeric_limits<int32_t>::max()} + 1);
  out->clear();
  out->reserve(static_cast<size_t>(ids.size()));
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] = ", id, " is not a token id below the vocabulary size ", vocab_size));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

// Applies an optional float field: unset keeps the default, NaN and inf are refused, and
// `in_range` is the documented domain.
template <typename InRange>
absl::Status OptionalFloat(bool has, float value, const char* field, const char* domain,
                           InRange in_range, float* out) {
  if (!has) return absl::OkStatus();
  if (!std::isfinite(value)) return Invalid(field, "must be a finite number");
  if (!in_range(value)) return Invalid(field, absl::StrCat(value, " is outside ", domain));
  *out = value;
  return absl::OkStatus();
}

absl::Status ConvertPrompt(const v1::GenerateRequest& proto, const ModelLimits& limits,
                           const Tokenizer* tokenizer, std::vector<int32_t>* ids,
                           const char** field) {
  switch (proto.prompt_case()) {
    case v1::GenerateRequest::kText:
      *field = "text";
      if (proto.text().empty()) return Invalid("text", "the prompt is empty");
      if (absl::Status s = CheckTextSize(proto.text(), limits.max_prompt_bytes, "text"); !s.ok()) {
        return s;
      }
      if (tokenizer == nullptr) return NoTokenizerError("text");
      {
        const std::vector<int32_t> encoded =
            tokenizer->Encode(proto.text(), /*add_special_tokens=*/true);
        if (encoded.empty()) return Invalid("text", "the prompt encodes to no tokens");
        return CheckTokenIds(encoded, limits.vocab_size, "text", ids);
      }
    case v1::GenerateRequest::kTokenIds:
      *field = "token_ids";
      if (proto.token_ids().ids().empty()) return Invalid("token_ids", "the prompt is empty");
      return CheckTokenIds(proto.token_ids().ids(), limits.vocab_size, "token_ids", ids);
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt: set text or token_ids");
}

absl::Status ConvertSampling(const v1::SamplingParams& p, SamplingOptions* out) {
  const auto non_negative = [](float v) { return v >= 0.0f; };
  const auto unit_open_closed = [](float v) { return v > 0.0f && v <= 1.0f; };
  const auto unit_closed = [](float v) { return v >= 0.0f && v <= 1.0f; };
  const auto positive = [](float v) { return v > 0.0f; };
  const auto penalty = [](float v) { return v >= -2.0f && v <= 2.0f; };
  absl::Status s = OptionalFloat(p.has_temperature(), p.temperature(), "temperature", "[0, inf)",
                                 non_negative, &out->temperature);
  if (s.ok()) {
    s = OptionalFloat(p.has_top_p(), p.top_p(), "top_p", "(0, 1]", unit_open_closed, &out->top_p);
  }
  if (s.ok()) {
    s = OptionalFloat(p.has_min_p(), p.min_p(), "min_p", "[0, 1]", unit_closed, &out->min_p);
  }
  if (s.ok()) {
    s = OptionalFloat(p.has_repetition_penalty(), p.repetition_penalty(), "repetition_penalty",
                      "(0, inf)", positive, &out->repetition_penalty);
  }
  if (s.ok()) {
    s = OptionalFloat(p.has_presence_penalty(), p.presence_penalty(), "presence_penalty", "[-2, 2]",
                      penalty, &out->presence_penalty);
  }
  if (s.ok()) {
    s = OptionalFloat(p.has_frequency_penalty(), p.frequency_penalty(), "frequency_penalty",
                      "[-2, 2]", penalty, &out->frequency_penalty);
  }
  if (!s.ok()) return s;
  if (p.has_top_k()) {
    if (p.top_k() < 0) return Invalid("top_k", absl::StrCat(p.top_k(), " is negative"));
    out->top_k = p.top_k();
  }
  if (p.has_seed()) out->seed = p.seed();
  return absl::OkStatus();
}

absl::Status ConvertStopping(const v1::StoppingCriteria& p, const ModelLimits& limits,
                             int64_t num_prompt_tokens, StoppingOptions* out) {
  if (p.has_max_tokens()) {
    if (p.max_tokens() == 0) return Invalid("max_tokens", "must be at least 1 when set");
    // Anything beyond the context is the context limit, so clamping loses nothing.
    out->max_tokens = static_cast<int32_t>(
        std::min<uint64_t>(p.max_tokens(), std::numeric_limits<int32_t>::max()));
  }
  if (num_prompt_tokens + int64_t{p.min_tokens()} > limits.max_context_tokens) {
    return Invalid(
        "min_tokens",
        absl::StrCat(p.min_tokens(), " plus the prompt's ", num_prompt_tokens,
                     " tokens exceed the context limit of ", limits.max_context_tokens, " tokens"));
  }
  out->min_tokens = static_cast<int32_t>(p.min_tokens());
  for (int i = 0; i < p.stop_size(); ++i) {
    if (p.stop(i).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "]: stop strings must not be empty"));
    }
  }
  out->stop.assign(p.stop().begin(), p.stop().end());
  if (absl::Status s = CheckTokenIds(p.stop_token_ids(), limits.vocab_size, "stop_token_ids",
                                     &out->stop_token_ids);
      !s.ok()) {
    return s;
  }
  out->ignore_eos = p.ignore_eos();
  out->include_stop_str_in_output = p.include_stop_str_in_output();
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTextSize(const std::string& text, int64_t max_bytes, const char* field) {
  if (static_cast<int64_t>(text.size()) <= max_bytes) return absl::OkStatus();
  return Invalid(field, absl::StrCat(text.size(), " bytes are over the limit of ", max_bytes,
                                     " bytes (--max_prompt_bytes)"));
}

absl::Status NoTokenizerError(const char* field) {
  return absl::FailedPreconditionError(absl::StrCat(
      field, ": the model directory has no tokenizer.json, so only token ids are served"));
}

absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& proto, const ModelLimits& limits,
                                        const Tokenizer* tokenizer) {
  Request request;
  request.id = proto.request_id();
  const char* prompt_field = "prompt";
  if (absl::Status s =
          ConvertPrompt(proto, limits, tokenizer, &request.prompt_token_ids, &prompt_field);
      !s.ok()) {
    return s;
  }
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  if (num_prompt >= limits.max_context_tokens) {
    return Invalid(prompt_field, absl::StrCat("the prompt has ", num_prompt,
                                              " tokens; it must be shorter than the context "
                                              "limit of ",
                                              limits.max_context_tokens, " tokens"));
  }
  if (absl::Status s = ConvertSampling(proto.sampling(), &request.sampling); !s.ok()) return s;
  if (absl::Status s = ConvertStopping(proto.stopping(), limits, num_prompt, &request.stopping);
      !s.ok()) {
    return s;
  }
  if (proto.top_logprobs() > static_cast<uint32_t>(kMaxTopLogprobs)) {
    return Invalid("top_logprobs",
                   absl::StrCat(proto.top_logprobs(), " is over the limit of ", kMaxTopLogprobs));
  }
  request.priority = proto.priority();
  request.top_logprobs = static_cast<int32_t>(proto.top_logprobs());
  request.return_logprobs = proto.return_logprobs() || proto.top_logprobs() > 0;
  return request;
}

absl::StatusOr<std::vector<int32_t>> DetokenizeIds(const v1::DetokenizeRequest& proto,
                                                   int64_t vocab_size) {
  std::vector<int32_t> ids;
  if (absl::Status s = CheckTokenIds(proto.ids(), vocab_size, "ids", &ids); !s.ok()) return s;
  return ids;
}

}  // namespace mlaserve
