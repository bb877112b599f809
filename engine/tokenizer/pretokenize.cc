// Pre-tokenizers: Split, ByteLevel, Digits and Sequence, with the Hugging Face semantics of
// split behaviours (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous) and
// inversion.

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Turns the alternating match / non-match spans of one piece into the pieces to keep.
void ApplyBehavior(std::string_view piece, const std::vector<Span>& spans, Behavior behavior,
                   std::vector<std::string_view>* out) {
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (behavior == Behavior::kIsolated || !s.is_match) kept.push_back({s.begin, s.end});
      }
      break;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().first = it->begin;
        } else {
          kept.push_back({it->begin, it->end});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [begin, end] : kept) {
    if (end > begin) out->push_back(piece.substr(begin, end - begin));
  }
}

// Adds the non-match span before `begin` and the match [begin, end).
void AddMatch(size_t begin, size_t end, size_t* last, std::vector<Span>* spans) {
  if (*last < begin) spans->push_back({*last, begin, false});
  spans->push_back({begin, end, true});
  *last = end;
}

void RegexSpans(const Regex& regex, std::string_view piece, std::vector<Span>* spans) {
  thread_local std::vector<char32_t> code_points;
  thread_local std::vector<uint32_t> offsets;
  DecodeUtf8(piece, &code_points, &offsets);
  size_t last = 0, from = 0, begin, end;
  while (regex.Find(code_points.data(), code_points.size(), from, &begin, &end)) {
    AddMatch(offsets[begin], offsets[end], &last, spans);
    from = end;
  }
  if (last < piece.size()) spans->push_back({last, piece.size(), false});
}

class SplitStep : public PreTokenizer {
 public:
  SplitStep(std::unique_ptr<Regex> regex, std::string literal, Behavior behavior, bool invert)
      : regex_(std::move(regex)),
        literal_(std::move(literal)),
        behavior_(behavior),
        invert_(invert) {}

  void PreTokenize(Pieces* pieces) const override {
    std::vector<std::string_view> out;
    std::vector<Span> spans;
    for (const std::string_view piece : pieces->views) {
      spans.clear();
      if (regex_ != nullptr) {
        RegexSpans(*regex_, piece, &spans);
      } else {
        size_t last = 0;
        for (size_t at = piece.find(literal_); at != std::string_view::npos;
             at = piece.find(literal_, at + literal_.size())) {
          AddMatch(at, at + literal_.size(), &last, &spans);
        }
        if (last < piece.size()) spans.push_back({last, piece.size(), false});
      }
      if (invert_) {
        for (Span& s : spans) s.is_match = !s.is_match;
      }
      ApplyBehavior(piece, spans, behavior_, &out);
    }
    pieces->views = std::move(out);
  }

 private:
  std::unique_ptr<Regex> regex_;  // null for a literal pattern
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class DigitsStep : public PreTokenizer {
 public:
  explicit DigitsStep(bool individual) : individual_(individual) {}

  void PreTokenize(Pieces* pieces) const override {
    std::vector<std::string_view> out;
    std::vector<Span> spans;
    for (const std::string_view piece : pieces->views) {
      spans.clear();
      size_t last = 0;
      for (size_t pos = 0; pos < piece.size();) {
        const size_t begin = pos;
        if (InCategories(NextCodePoint(piece, &pos), kNumberMask)) {
          AddMatch(begin, pos, &last, &spans);
        }
      }
      if (last < piece.size()) spans.push_back({last, piece.size(), false});
      ApplyBehavior(piece, spans, individual_ ? Behavior::kIsolated : Behavior::kContiguous, &out);
    }
    pieces->views = std::move(out);
  }

 private:
  bool individual_;
};

class ByteLevelStep : public PreTokenizer {
 public:
  ByteLevelStep(bool add_prefix_space, std::unique_ptr<Regex> regex, bool map_bytes)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)), map_bytes_(map_bytes) {}

  void PreTokenize(Pieces* pieces) const override {
    std::vector<std::string_view> out;
    std::vector<Span> spans;
    for (std::string_view piece : pieces->views) {
      if (add_prefix_space_ && piece[0] != ' ')
        piece = pieces->Store(absl::StrCat(" ", AbslView(piece)));
      if (regex_ == nullptr) {
        out.push_back(piece);
        continue;
      }
      spans.clear();
      RegexSpans(*regex_, piece, &spans);
      ApplyBehavior(piece, spans, Behavior::kIsolated, &out);
    }
    if (map_bytes_) {
      for (std::string_view& piece : out) {
        std::string mapped;
        AppendByteLevel(piece, &mapped);
        piece = pieces->Store(std::move(mapped));
      }
    }
    pieces->views = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
  bool map_bytes_;
};

absl::StatusOr<Behavior> ParseBehavior(const nlohmann::json& json) {
  const auto it = json.find("behavior");
  const std::string name = it != json.end() && it->is_string() ? it->get<std::string>() : "";
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer Split: unsupported behavior \"", name, "\""));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const nlohmann::json& json) {
  auto behavior = ParseBehavior(json);
  if (!behavior.ok()) return behavior.status();
  bool invert;
  if (auto s = JsonBool(json, "invert", false, "pre_tokenizer Split", &invert); !s.ok()) return s;
  const auto pattern = json.find("pattern");
  if (pattern == json.end() || !pattern->is_object()) {
    return absl::InvalidArgumentError("pre_tokenizer Split: missing pattern");
  }
  std::string text;
  if (JsonString(*pattern, "Regex", "", &text).ok()) {
    auto regex = Regex::Compile(text);
    if (!regex.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pre_tokenizer Split pattern: ", regex.status().message()));
    }
    return std::make_unique<SplitStep>(std::move(*regex), "", *behavior, invert);
  }
  if (JsonString(*pattern, "String", "", &text).ok() && !text.empty()) {
    return std::make_unique<SplitStep>(nullptr, text, *behavior, invert);
  }
  return absl::InvalidArgumentError(
      "pre_tokenizer Split: pattern must be {\"Regex\": ...} or a non-empty {\"String\": ...}");
}

absl::Status Flatten(const nlohmann::json& json, std::vector<const nlohmann::json*>* steps) {
  if (!json.is_object()) return absl::InvalidArgumentError("pre_tokenizer must be an object");
  std::string type;
  if (auto s = JsonString(json, "type", "pre_tokenizer", &type); !s.ok()) return s;
  if (type != "Sequence") {
    steps->push_back(&json);
    return absl::OkStatus();
  }
  const auto list = json.find("pretokenizers");
  if (list == json.end() || !list->is_array()) {
    return absl::InvalidArgumentError("pre_tokenizer Sequence: pretokenizers must be an array");
  }
  for (const auto& child : *list) {
    if (auto s = Flatten(child, steps); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreTokenizerChain> ParsePreTokenizer(const nlohmann::json& json,
                                                    bool defer_byte_mapping) {
  PreTokenizerChain chain;
  if (json.is_null()) return chain;
  std::vector<const nlohmann::json*> steps;
  if (auto s = Flatten(json, &steps); !s.ok()) return s;
  for (size_t i = 0; i < steps.size(); ++i) {
    const nlohmann::json& step = *steps[i];
    const std::string type = step["type"].get<std::string>();
    if (type == "Split") {
      auto split = ParseSplit(step);
      if (!split.ok()) return split.status();
      chain.steps.push_back(std::move(*split));
    } else if (type == "ByteLevel") {
      bool add_prefix_space, use_regex;
      if (auto s = JsonBool(step, "add_prefix_space", true, "pre_tokenizer ByteLevel",
                            &add_prefix_space);
          !s.ok()) {
        return s;
      }
      if (auto s = JsonBool(step, "use_regex", true, "pre_tokenizer ByteLevel", &use_regex);
          !s.ok()) {
        return s;
      }
      std::unique_ptr<Regex> regex;
      if (use_regex) regex = *Regex::Compile(kGpt2Pattern);
      const bool defer = defer_byte_mapping && i + 1 == steps.size();
      chain.defers_byte_mapping = defer;
      chain.steps.push_back(
          std::make_unique<ByteLevelStep>(add_prefix_space, std::move(regex), !defer));
    } else if (type == "Digits") {
      bool individual;
      if (auto s = JsonBool(step, "individual_digits", false, "pre_tokenizer Digits", &individual);
          !s.ok()) {
        return s;
      }
      chain.steps.push_back(std::make_unique<DigitsStep>(individual));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("pre_tokenizer type \"", type, "\" is not supported"));
    }
  }
  return chain;
}

}  // namespace mlaserve::tokenizer_internal
