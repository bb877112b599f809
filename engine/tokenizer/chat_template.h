// Stand-in for the chat-template interpreter (replaced when the interpreter lands): renders
// each message as "role: content\n" and, with add_generation_prompt, a final "assistant: ".
#ifndef MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mlaserve {

struct ChatTemplateInputs {
  const nlohmann::json* messages = nullptr;
  const nlohmann::json* tools = nullptr;
  bool add_generation_prompt = true;
  const nlohmann::json* extra = nullptr;
};

class ChatTemplate {
 public:
  static absl::StatusOr<ChatTemplate> Compile(std::string_view source, std::string bos_token,
                                              std::string eos_token);
  static absl::StatusOr<ChatTemplate> Load(const std::string& model_dir,
                                           const std::string& override_file = "");
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
