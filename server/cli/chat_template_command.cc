#include "server/cli/chat_template_command.h"

#include <iostream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/util/read_file.h"
#include "nlohmann/json.hpp"
#include "server/cli/engine_flags.h"

ABSL_FLAG(std::string, messages, "", "chat-template: JSON file with the array of messages");
ABSL_FLAG(std::string, tools, "", "chat-template: JSON file with the array of tools (optional)");
ABSL_FLAG(bool, add_generation_prompt, true,
          "chat-template: end the prompt with the assistant turn's opening");
ABSL_DECLARE_FLAG(std::string, chat_template);

namespace mlaserve {
namespace {

bool ReadJsonFile(const std::string& path, nlohmann::json* out) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    std::cerr << "mlaserve chat-template: " << text.status().message() << "\n";
    return false;
  }
  *out = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_array()) {
    std::cerr << "mlaserve chat-template: " << path << " is not a JSON array\n";
    return false;
  }
  return true;
}

}  // namespace

int RunChatTemplateCommand() {
  if (absl::GetFlag(FLAGS_messages).empty()) {
    std::cerr << "mlaserve chat-template: --messages=FILE.json is required\n";
    return 1;
  }
  auto chat_template = ChatTemplate::Load(ModelDirFromFlags(), absl::GetFlag(FLAGS_chat_template));
  if (!chat_template.ok()) {
    std::cerr << "mlaserve chat-template: " << chat_template.status().message() << "\n";
    return 1;
  }
  nlohmann::json messages, tools;
  if (!ReadJsonFile(absl::GetFlag(FLAGS_messages), &messages)) return 1;
  ChatTemplateInputs inputs;
  inputs.messages = &messages;
  if (!absl::GetFlag(FLAGS_tools).empty()) {
    if (!ReadJsonFile(absl::GetFlag(FLAGS_tools), &tools)) return 1;
    inputs.tools = &tools;
  }
  inputs.add_generation_prompt = absl::GetFlag(FLAGS_add_generation_prompt);
  auto prompt = chat_template->Render(inputs);
  if (!prompt.ok()) {
    std::cerr << prompt.status().message() << "\n";
    return 1;
  }
  std::cout << *prompt << std::flush;
  return 0;
}

}  // namespace mlaserve
