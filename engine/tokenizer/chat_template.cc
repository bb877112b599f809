#include "engine/tokenizer/chat_template.h"

#include <cstdlib>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja_ast.h"
#include "engine/tokenizer/jinja_eval.h"
#include "engine/tokenizer/jinja_lexer.h"
#include "engine/tokenizer/jinja_parser.h"
#include "engine/util/read_file.h"
#include "nlohmann/json.hpp"

namespace mlaserve {

struct ChatTemplate::Compiled {
  jinja::Body body;
};

namespace {

std::string TokenText(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

jinja::Value StrftimeNow() {
  return jinja::Value::Function([](jinja::ValueList args, jinja::KwArgs) -> absl::StatusOr<jinja::Value> {
    if (args.empty() || args[0].kind != jinja::Kind::kString) {
      return absl::InvalidArgumentError("strftime_now() takes a format string");
    }
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    if (const char* fixed = std::getenv("MLASERVE_CHAT_TEMPLATE_NOW")) {
      now = static_cast<std::time_t>(std::strtoll(fixed, nullptr, 10));
      gmtime_r(&now, &tm);
    } else {
      localtime_r(&now, &tm);
    }
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), args[0].s.c_str(), &tm);
    return jinja::Value::Str(std::string(buf, n));
  });
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Compile(std::string_view source, std::string bos_token,
                                                   std::string eos_token) {
  auto tokens = jinja::Lex(source);
  if (!tokens.ok()) return tokens.status();
  auto body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  auto compiled = std::make_shared<Compiled>();
  compiled->body = std::move(*body);
  ChatTemplate t;
  t.compiled_ = std::move(compiled);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& model_dir,
                                                const std::string& override_file) {
  std::string path = model_dir + "/tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  auto text = ReadWholeFile(path);
  if (!text.ok() && !absl::IsNotFound(text.status())) return text.status();
  if (text.ok()) {
    config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
    }
  } else if (override_file.empty()) {
    return absl::NotFoundError(absl::StrCat(model_dir, " has no tokenizer_config.json (no chat template)"));
  }
  std::string source;
  if (!override_file.empty()) {
    auto o = ReadWholeFile(override_file);
    if (!o.ok()) return o.status();
    source = std::move(*o);
  } else {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) {
      return absl::NotFoundError(absl::StrCat(path, " has no chat_template"));
    }
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      bool found = false;
      for (const auto& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) return absl::NotFoundError(absl::StrCat(path, ": chat_template has no \"default\" entry"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template is neither a string nor a list"));
    }
  }
  auto t = Compile(source, TokenText(config, "bos_token"), TokenText(config, "eos_token"));
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  jinja::Value globals = jinja::Value::Dict();
  // transformers: template_kwargs (extra) are passed first; the named arguments win.
  if (inputs.extra != nullptr) {
    if (!inputs.extra->is_object()) return absl::InvalidArgumentError("chat template extra variables must be an object");
    for (auto it = inputs.extra->begin(); it != inputs.extra->end(); ++it) {
      globals.Set(it.key(), jinja::FromJson(*it));
    }
  }
  if (inputs.messages == nullptr || !inputs.messages->is_array()) {
    return absl::InvalidArgumentError("chat template messages must be an array");
  }
  globals.Set("messages", jinja::FromJson(*inputs.messages));
  if (inputs.tools != nullptr) globals.Set("tools", jinja::FromJson(*inputs.tools));
  globals.Set("add_generation_prompt", jinja::Value::Bool(inputs.add_generation_prompt));
  globals.Set("bos_token", jinja::Value::Str(bos_token_));
  globals.Set("eos_token", jinja::Value::Str(eos_token_));
  globals.Set("strftime_now", StrftimeNow());
  return jinja::Render(compiled_->body, globals);
}

}  // namespace mlaserve
