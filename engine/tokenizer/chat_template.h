// Chat templates: renders a Hugging Face `chat_template` (Jinja2) exactly as transformers'
// apply_chat_template does (Jinja2 with trim_blocks, lstrip_blocks, raise_exception,
// strftime_now and transformers' tojson), with the project's own Jinja2 interpreter.
#ifndef MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace mlaserve {

namespace jinja {
struct Stmt;
}

struct ChatTemplateInputs {
  const nlohmann::json* messages = nullptr;  // array of OpenAI-style messages (role, content, tool_calls, ...)
  const nlohmann::json* tools = nullptr;     // optional array of tools (nullptr: undefined in the template)
  bool add_generation_prompt = true;
  const nlohmann::json* extra = nullptr;     // optional object of extra variables (e.g. documents)
};

// A compiled chat template. Immutable after Compile/Load; Render is thread-safe.
// strftime_now(format) uses the current local time, or, when the environment variable
// MLASERVE_CHAT_TEMPLATE_NOW holds seconds since the epoch, that instant in UTC (for tests).
class ChatTemplate {
 public:
  // Compiles a template; an unsupported construct, filter, test or method fails here with a
  // message naming it and the line, never at render time.
  static absl::StatusOr<ChatTemplate> Compile(std::string_view source, std::string bos_token,
                                              std::string eos_token);
  // Loads `chat_template` from DIR/tokenizer_config.json (a string, or a list of
  // {name, template}: takes "default"), bos_token / eos_token (strings or AddedToken objects
  // {content: ...}); override_file, if non-empty, replaces the template text. NotFound when the
  // model has no template.
  static absl::StatusOr<ChatTemplate> Load(const std::string& model_dir,
                                           const std::string& override_file = "");
  // Renders; raise_exception(msg) in the template → InvalidArgument with msg. Other template
  // errors (undefined attribute access, type errors) → InvalidArgument naming the line.
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  struct Compiled;
  ChatTemplate() = default;
  std::shared_ptr<const Compiled> compiled_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
