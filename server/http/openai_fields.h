// The fields of OpenAI request bodies (internal to server/http/openai_request.cc): each known
// field's JSON shape is checked here and its value set on the v1::GenerateRequest that the one
// validator then checks, or on the OpenAiRequest. Rules of the validator are never repeated
// here; only shapes (a number, a list of strings, ...) and the OpenAI-only fields.
//
// Thread-safety: pure functions.
#ifndef MLASERVE_SERVER_HTTP_OPENAI_FIELDS_H_
#define MLASERVE_SERVER_HTTP_OPENAI_FIELDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "mlaserve/v1/inference.pb.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_request.h"

namespace mlaserve::openai_internal {

// What the fields of a body set, before the prompt is known.
struct Fields {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  v1::GenerateRequest proto;  // sampling, stopping, priority, logprobs
  OpenAiRequest out;
  int64_t n = 1;
  int64_t best_of = 0;  // 0: not given
  const nlohmann::json* prompt = nullptr;
  nlohmann::json messages;
  const nlohmann::json* tools = nullptr;
  const nlohmann::json* chat_template_kwargs = nullptr;
  bool add_generation_prompt = true;
  std::string max_tokens_field = "max_tokens";  // or max_completion_tokens, as the client sent
};

// INVALID_ARGUMENT "field: what".
absl::Status Invalid(std::string_view field, std::string_view what);

// Appends the token ids of the JSON list `v` to `ids`; ids must fit uint32.
absl::Status TokenIdList(const nlohmann::json& v, std::string_view field,
                         google::protobuf::RepeatedField<uint32_t>* ids);

// Applies every member of `body` to `f`; an unknown field, or one of the other endpoint, is
// refused by name. Members that are null count as not given.
absl::Status ApplyFields(const nlohmann::json& body, Fields& f);

}  // namespace mlaserve::openai_internal

#endif  // MLASERVE_SERVER_HTTP_OPENAI_FIELDS_H_
