// Normalizers: NFC, Replace, Prepend and Sequence. Other normal forms and the BERT-style
// normalizers are refused by name.

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

class NfcNormalizer : public Normalizer {
 public:
  std::string Normalize(std::string_view text) const override { return ToNfc(text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string_view text) const override {
    return text.empty() ? std::string() : absl::StrCat(prefix_, AbslView(text));
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string literal, std::string content)
      : regex_(std::move(regex)), literal_(std::move(literal)), content_(std::move(content)) {}

  std::string Normalize(std::string_view text) const override {
    std::string out;
    if (regex_ == nullptr) {
      size_t last = 0;
      for (size_t at = text.find(literal_); at != std::string_view::npos;
           at = text.find(literal_, last)) {
        absl::StrAppend(&out, AbslView(text.substr(last, at - last)), content_);
        last = at + literal_.size();
      }
      absl::StrAppend(&out, AbslView(text.substr(last)));
      return out;
    }
    std::vector<char32_t> code_points;
    std::vector<uint32_t> offsets;
    DecodeUtf8(text, &code_points, &offsets);
    size_t last = 0, from = 0, begin, end;
    while (regex_->Find(code_points.data(), code_points.size(), from, &begin, &end)) {
      absl::StrAppend(&out, AbslView(text.substr(last, offsets[begin] - last)), content_);
      last = offsets[end];
      from = end;
    }
    absl::StrAppend(&out, AbslView(text.substr(last)));
    return out;
  }

 private:
  std::unique_ptr<Regex> regex_;  // null for a literal pattern
  std::string literal_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& step : steps_) current = step->Normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> ParseReplace(const nlohmann::json& json) {
  std::string content, text;
  if (auto s = JsonString(json, "content", "normalizer Replace", &content); !s.ok()) return s;
  const auto pattern = json.find("pattern");
  if (pattern != json.end() && pattern->is_object()) {
    if (JsonString(*pattern, "Regex", "", &text).ok()) {
      auto regex = Regex::Compile(text);
      if (!regex.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("normalizer Replace pattern: ", regex.status().message()));
      }
      return std::make_unique<ReplaceNormalizer>(std::move(*regex), "", content);
    }
    if (JsonString(*pattern, "String", "", &text).ok() && !text.empty()) {
      return std::make_unique<ReplaceNormalizer>(nullptr, text, content);
    }
  }
  return absl::InvalidArgumentError(
      "normalizer Replace: pattern must be {\"Regex\": ...} or a non-empty {\"String\": ...}");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& json) {
  if (json.is_null()) return nullptr;
  if (!json.is_object()) return absl::InvalidArgumentError("normalizer must be an object");
  std::string type;
  if (auto s = JsonString(json, "type", "normalizer", &type); !s.ok()) return s;
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Replace") return ParseReplace(json);
  if (type == "Prepend") {
    std::string prefix;
    if (auto s = JsonString(json, "prepend", "normalizer Prepend", &prefix); !s.ok()) return s;
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Sequence") {
    const auto list = json.find("normalizers");
    if (list == json.end() || !list->is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence: normalizers must be an array");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& child : *list) {
      auto step = ParseNormalizer(child);
      if (!step.ok()) return step.status();
      if (*step != nullptr) steps.push_back(std::move(*step));
    }
    if (steps.empty()) return nullptr;  // normalizes nothing: same as no normalizer
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat("normalizer type \"", type,
                                                 "\" is not supported (supported: NFC, "
                                                 "Replace, Prepend, Sequence)"));
}

}  // namespace mlaserve::tokenizer_internal
