// Post-processors: TemplateProcessing (single-sequence template), BertProcessing and
// RobertaProcessing (cls ... sep), ByteLevel (offsets only, so no effect on ids) and Sequence.

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

// A single-sequence template: special-token ids around the position of the sequence.
class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}

  void Process(bool add_special_tokens, std::vector<int32_t>* ids) const override {
    if (!add_special_tokens) return;
    ids->insert(ids->begin(), before_.begin(), before_.end());
    ids->insert(ids->end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void Process(bool add_special_tokens, std::vector<int32_t>* ids) const override {
    for (const auto& step : steps_) step->Process(add_special_tokens, ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

absl::Status TemplateError(std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("post_processor TemplateProcessing: ", AbslView(what)));
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const nlohmann::json& json) {
  const auto single = json.find("single");
  const auto special = json.find("special_tokens");
  if (single == json.end() || !single->is_array()) return TemplateError("single must be a list");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const auto& piece : *single) {
    if (piece.contains("Sequence")) {
      if (seen_sequence) return TemplateError("single has more than one $A");
      seen_sequence = true;
      continue;
    }
    const auto token = piece.find("SpecialToken");
    if (token == piece.end() || !token->contains("id") || !(*token)["id"].is_string()) {
      return TemplateError("single entries must be SpecialToken or Sequence");
    }
    const std::string name = (*token)["id"].get<std::string>();
    if (special == json.end() || !special->is_object() || !special->contains(name) ||
        !(*special)[name].contains("ids") || !(*special)[name]["ids"].is_array()) {
      return TemplateError(absl::StrCat("special_tokens has no ids for \"", name, "\""));
    }
    for (const auto& id : (*special)[name]["ids"]) {
      const std::optional<int32_t> valid = JsonTokenId(id);
      if (!valid.has_value()) return TemplateError("special token ids must be valid ids");
      (seen_sequence ? after : before).push_back(*valid);
    }
  }
  if (!seen_sequence) return TemplateError("single has no $A");
  return std::make_unique<TemplateProcessor>(std::move(before), std::move(after));
}

// BertProcessing and RobertaProcessing: "cls": [token, id], "sep": [token, id].
absl::StatusOr<std::unique_ptr<PostProcessor>> ParseClsSep(const nlohmann::json& json,
                                                           std::string_view type) {
  int32_t ids[2];
  const char* keys[2] = {"cls", "sep"};
  for (int i = 0; i < 2; ++i) {
    const auto it = json.find(keys[i]);
    const std::optional<int32_t> id = it != json.end() && it->is_array() && it->size() == 2
                                          ? JsonTokenId((*it)[1])
                                          : std::nullopt;
    if (!id.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("post_processor ", AbslView(type), ": ", keys[i], " must be [token, id]"));
    }
    ids[i] = *id;
  }
  return std::make_unique<TemplateProcessor>(std::vector<int32_t>{ids[0]},
                                             std::vector<int32_t>{ids[1]});
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const nlohmann::json& json) {
  if (json.is_null()) return nullptr;
  if (!json.is_object()) return absl::InvalidArgumentError("post_processor must be an object");
  std::string type;
  if (auto s = JsonString(json, "type", "post_processor", &type); !s.ok()) return s;
  if (type == "ByteLevel") return nullptr;
  if (type == "TemplateProcessing") return ParseTemplate(json);
  if (type == "BertProcessing" || type == "RobertaProcessing") return ParseClsSep(json, type);
  if (type == "Sequence") {
    const auto list = json.find("processors");
    if (list == json.end() || !list->is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence: processors must be an array");
    }
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& child : *list) {
      auto step = ParsePostProcessor(child);
      if (!step.ok()) return step.status();
      if (*step != nullptr) steps.push_back(std::move(*step));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("post_processor type \"", type, "\" is not supported"));
}

}  // namespace mlaserve::tokenizer_internal
