#include "server/http/openai_fields.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace mlaserve::openai_internal {
namespace {

using json = nlohmann::json;

// JSON type checks: the value's shape, never a rule of the validator.
absl::Status Bool(const json& v, std::string_view field, bool* out) {
  if (!v.is_boolean()) return Invalid(field, "must be a boolean");
  *out = v.get<bool>();
  return absl::OkStatus();
}

absl::Status Number(const json& v, std::string_view field, float* out) {
  if (!v.is_number()) return Invalid(field, "must be a number");
  *out = static_cast<float>(v.get<double>());
  return absl::OkStatus();
}

absl::Status Integer(const json& v, std::string_view field, int64_t lo, int64_t hi, int64_t* out) {
  const bool fits =
      v.is_number_integer() && (!v.is_number_unsigned() ||
                                v.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()});
  if (!fits || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return Invalid(field, absl::StrCat("must be an integer in [", lo, ", ", hi, "]"));
  }
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

constexpr int64_t kUint32Max = std::numeric_limits<uint32_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();

absl::Status MaxTokens(const json& v, std::string_view field, Fields& f) {
  int64_t n = 0;
  if (absl::Status s = Integer(v, field, 0, kUint32Max, &n); !s.ok()) return s;
  f.proto.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(n));
  f.max_tokens_field = std::string(field);
  return absl::OkStatus();
}

absl::Status Stop(const json& v, std::string_view field, Fields& f) {
  auto* stop = f.proto.mutable_stopping()->mutable_stop();
  if (v.is_string()) {
    stop->Add(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array()) return Invalid(field, "must be a string or a list of strings");
  for (const json& s : v) {
    if (!s.is_string()) return Invalid(field, "must be a string or a list of strings");
    stop->Add(s.get<std::string>());
  }
  return absl::OkStatus();
}

// Fields OpenAI defines that the engine cannot honour unless they keep their neutral value.
absl::Status Neutral(const json& v, std::string_view field, const json& neutral) {
  if (v == neutral || (v.is_object() && v.empty()) ||
      (v.is_string() && v.get<std::string>().empty())) {
    return absl::OkStatus();
  }
  return Invalid(field, "is not supported by this server");
}

using Setter = absl::Status (*)(const json& v, std::string_view field, Fields& f);
enum Where : uint8_t { kBoth = 3, kCompletionsOnly = 1, kChatOnly = 2 };
struct FieldSpec {
  const char* name;
  Where where;
  Setter set;
};

absl::Status SetLogprobs(const json& v, std::string_view field, Fields& f) {
  if (f.endpoint == OpenAiEndpoint::kChatCompletions) {
    bool on = false;
    if (absl::Status s = Bool(v, field, &on); !s.ok()) return s;
    f.proto.set_return_logprobs(on);
    return absl::OkStatus();
  }
  // Completions: the number of alternatives per token (0: only the sampled token's).
  int64_t k = 0;
  if (absl::Status s = Integer(v, field, 0, kUint32Max, &k); !s.ok()) return s;
  f.proto.set_return_logprobs(true);
  f.proto.set_top_logprobs(static_cast<uint32_t>(k));
  return absl::OkStatus();
}

const FieldSpec kFields[] = {
    {"model", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       if (!v.is_string()) return Invalid(field, "must be a string");
       f.out.model = v.get<std::string>();
       return absl::OkStatus();
     }},
    {"prompt", kCompletionsOnly,
     [](const json& v, std::string_view, Fields& f) {
       f.prompt = &v;
       return absl::OkStatus();
     }},
    {"messages", kChatOnly,
     [](const json& v, std::string_view, Fields& f) {
       f.messages = v;
       return absl::OkStatus();
     }},
    {"max_tokens", kBoth, MaxTokens},
    {"max_completion_tokens", kChatOnly, MaxTokens},
    {"temperature", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_temperature(x);
       return s;
     }},
    {"top_p", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_top_p(x);
       return s;
     }},
    {"min_p", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_min_p(x);
       return s;
     }},
    {"presence_penalty", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_presence_penalty(x);
       return s;
     }},
    {"frequency_penalty", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_frequency_penalty(x);
       return s;
     }},
    {"repetition_penalty", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       float x = 0;
       absl::Status s = Number(v, field, &x);
       if (s.ok()) f.proto.mutable_sampling()->set_repetition_penalty(x);
       return s;
     }},
    {"top_k", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       int64_t k = 0;
       absl::Status s = Integer(v, field, kInt32Min, kInt32Max, &k);
       // -1 is vLLM's spelling of "off", the default.
       if (s.ok() && k != -1) f.proto.mutable_sampling()->set_top_k(static_cast<int32_t>(k));
       return s;
     }},
    {"seed", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       int64_t seed = 0;
       absl::Status s = Integer(v, field, std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), &seed);
       if (s.ok()) f.proto.mutable_sampling()->set_seed(static_cast<uint64_t>(seed));
       return s;
     }},
    {"stop", kBoth, Stop},
    {"stop_token_ids", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       return TokenIdList(v, field, f.proto.mutable_stopping()->mutable_stop_token_ids());
     }},
    {"min_tokens", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       int64_t n = 0;
       absl::Status s = Integer(v, field, 0, kUint32Max, &n);
       if (s.ok()) f.proto.mutable_stopping()->set_min_tokens(static_cast<uint32_t>(n));
       return s;
     }},
    {"ignore_eos", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       bool on = false;
       absl::Status s = Bool(v, field, &on);
       f.proto.mutable_stopping()->set_ignore_eos(on);
       return s;
     }},
    {"include_stop_str_in_output", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       bool on = false;
       absl::Status s = Bool(v, field, &on);
       f.proto.mutable_stopping()->set_include_stop_str_in_output(on);
       return s;
     }},
    {"priority", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       int64_t p = 0;
       absl::Status s = Integer(v, field, kInt32Min, kInt32Max, &p);
       f.proto.set_priority(static_cast<int32_t>(p));
       return s;
     }},
    {"n", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       return Integer(v, field, 1, kMaxOpenAiChoices, &f.n);
     }},
    {"best_of", kCompletionsOnly,
     [](const json& v, std::string_view field, Fields& f) {
       return Integer(v, field, 1, kMaxOpenAiChoices, &f.best_of);
     }},
    {"stream", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       return Bool(v, field, &f.out.stream);
     }},
    {"stream_options", kBoth,
     [](const json& v, std::string_view field, Fields& f) {
       if (!v.is_object()) return Invalid(field, "must be an object");
       for (const auto& [key, value] : v.items()) {
         if (key != "include_usage")
           return Invalid(std::string(field) + "." + key, "unknown field");
         if (value.is_null()) continue;
         if (absl::Status s = Bool(value, "stream_options.include_usage", &f.out.include_usage);
             !s.ok()) {
           return s;
         }
       }
       return absl::OkStatus();
     }},
    {"logprobs", kBoth, SetLogprobs},
    {"top_logprobs", kChatOnly,
     [](const json& v, std::string_view field, Fields& f) {
       int64_t k = 0;
       absl::Status s = Integer(v, field, 0, kUint32Max, &k);
       f.proto.set_top_logprobs(static_cast<uint32_t>(k));
       return s;
     }},
    {"user", kBoth,
     [](const json& v, std::string_view field, Fields&) {
       return v.is_string() ? absl::OkStatus() : Invalid(field, "must be a string");
     }},
    {"echo", kCompletionsOnly,
     [](const json& v, std::string_view field, Fields&) { return Neutral(v, field, false); }},
    {"suffix", kCompletionsOnly,
     [](const json& v, std::string_view field, Fields&) { return Neutral(v, field, ""); }},
    {"logit_bias", kBoth,
     [](const json& v, std::string_view field, Fields&) { return Neutral(v, field, json()); }},
    {"response_format", kChatOnly,
     [](const json& v, std::string_view field, Fields&) {
       return Neutral(v, field, json{{"type", "text"}});
     }},
    {"tools", kChatOnly,
     [](const json& v, std::string_view field, Fields& f) {
       if (!v.is_array()) return Invalid(field, "must be a list");
       f.tools = &v;
       return absl::OkStatus();
     }},
    {"tool_choice", kChatOnly,
     [](const json& v, std::string_view field, Fields&) {
       // Tool calls are not parsed out of the output: the model may only decide by itself.
       if (v == "none" || v == "auto") return absl::OkStatus();
       return Invalid(field, "only \"none\" and \"auto\" are supported");
     }},
    {"add_generation_prompt", kChatOnly,
     [](const json& v, std::string_view field, Fields& f) {
       return Bool(v, field, &f.add_generation_prompt);
     }},
    {"chat_template_kwargs", kChatOnly,
     [](const json& v, std::string_view field, Fields& f) {
       if (!v.is_object()) return Invalid(field, "must be an object");
       f.chat_template_kwargs = &v;
       return absl::OkStatus();
     }},
};

}  // namespace

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(std::string(field) + ": " + std::string(what));
}

absl::Status TokenIdList(const json& v, std::string_view field,
                         google::protobuf::RepeatedField<uint32_t>* ids) {
  if (!v.is_array()) return Invalid(field, "must be a list of token ids");
  for (const json& id : v) {
    int64_t value = 0;
    if (absl::Status s = Integer(id, field, 0, kUint32Max, &value); !s.ok()) return s;
    ids->Add(static_cast<uint32_t>(value));
  }
  return absl::OkStatus();
}

absl::Status ApplyFields(const json& body, Fields& f) {
  const Where here = f.endpoint == OpenAiEndpoint::kCompletions ? kCompletionsOnly : kChatOnly;
  for (const auto& [key, value] : body.items()) {
    const FieldSpec* spec = nullptr;
    for (const FieldSpec& candidate : kFields) {
      if (key == candidate.name && (candidate.where & here) != 0) spec = &candidate;
    }
    if (spec == nullptr) return Invalid(key, "unknown field");
    // SDKs send null for "not given".
    if (value.is_null()) continue;
    if (absl::Status s = spec->set(value, key, f); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::openai_internal
