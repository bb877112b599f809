// Fuzzes ChatTemplate::Compile and Render (engine/tokenizer/chat_template.h) with arbitrary
// template text over a fixed conversation (system, user, assistant tool call, tool result).
// Checked: neither crashes, hangs nor throws; a compiled template renders or fails with a status.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_check.h"

namespace {

const nlohmann::json& Messages() {
  static const nlohmann::json* const messages = new nlohmann::json(nlohmann::json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? 你好 🌍"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "  21.5 degrees\n"}])"));
  return *messages;
}

const nlohmann::json& Tools() {
  static const nlohmann::json* const tools = new nlohmann::json(nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])"));
  return *tools;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto compiled = mlaserve::ChatTemplate::Compile(source, "<s>", "</s>");
  if (!compiled.ok()) return 0;
  mlaserve::ChatTemplateInputs inputs;
  inputs.messages = &Messages();
  inputs.tools = size % 2 == 0 ? &Tools() : nullptr;
  inputs.add_generation_prompt = size % 3 != 0;
  auto rendered = compiled->Render(inputs);
  FUZZ_CHECK(rendered.ok() || !rendered.status().message().empty() ||
             rendered.status().code() == absl::StatusCode::kInvalidArgument);
  return 0;
}
