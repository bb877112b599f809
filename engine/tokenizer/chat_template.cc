#include "engine/tokenizer/chat_template.h"

namespace mlaserve {

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view, std::string, std::string) {
  return ChatTemplate();
}

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const std::string&, const std::string&) {
  return ChatTemplate();
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  std::string out;
  for (const nlohmann::json& m : *inputs.messages) {
    if (m.value("role", "") == "raise") return absl::InvalidArgumentError("raised");
    out += m.value("role", "") + ": " + m.value("content", "") + "\n";
  }
  if (inputs.add_generation_prompt) out += "assistant: ";
  return out;
}

}  // namespace mlaserve
