// Decoders as a streaming pipeline. Each Hugging Face decoder maps a list of token strings to a
// list of strings; Fuse and ByteLevel reduce the list to a single string. Stages before the
// first such reduction therefore see whole tokens, and stages after it see one growing string,
// which they receive piece by piece and from which they hold back only what a later piece could
// still change. The result is byte-for-byte the batch decode.

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

absl::Status DecoderError(std::string_view type, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("decoder ", AbslView(type), ": ", AbslView(what)));
}

// "<0xHH>" tokens of byte-fallback vocabularies (Rust's u8::from_str_radix also takes "+H").
bool ParseByteToken(std::string_view token, uint8_t* byte) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return false;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    if (i == 3 && c == '+') continue;
    const int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (v < 0) return false;
    value = value * 16 + v;
  }
  *byte = static_cast<uint8_t>(value);
  return true;
}

std::string ReplaceAll(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  size_t last = 0;
  for (size_t at = text.find(pattern); at != std::string_view::npos;
       at = text.find(pattern, last)) {
    absl::StrAppend(&out, AbslView(text.substr(last, at - last)), AbslView(content));
    last = at + pattern.size();
  }
  absl::StrAppend(&out, AbslView(text.substr(last)));
  return out;
}

size_t UnitLength(const DecoderPipeline::Stage& stage) {
  std::string unit;
  AppendUtf8(stage.strip_char, &unit);
  return unit.size();
}

// Byte length of up to `limit` leading (or trailing) copies of `c` in `text`.
size_t StripLength(std::string_view text, char32_t c, int limit, bool from_end) {
  std::string unit;
  AppendUtf8(c, &unit);
  size_t length = 0;
  for (int i = 0; i < limit; ++i) {
    const std::string_view rest = text.substr(from_end ? 0 : length, text.size() - length);
    const bool match = from_end ? rest.ends_with(unit) : rest.starts_with(unit);
    if (!match) break;
    length += unit.size();
  }
  return length;
}

absl::Status ParseStage(const nlohmann::json& json, std::vector<DecoderPipeline::Stage>* out) {
  using Kind = DecoderPipeline::StageKind;
  if (!json.is_object()) return absl::InvalidArgumentError("decoder must be an object");
  std::string type;
  if (auto s = JsonString(json, "type", "decoder", &type); !s.ok()) return s;
  DecoderPipeline::Stage stage;
  if (type == "Sequence") {
    const auto list = json.find("decoders");
    if (list == json.end() || !list->is_array()) {
      return DecoderError(type, "decoders must be an array");
    }
    for (const auto& child : *list) {
      if (auto s = ParseStage(child, out); !s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    stage.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    stage.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    stage.kind = Kind::kFuse;
  } else if (type == "Replace") {
    stage.kind = Kind::kReplace;
    const auto pattern = json.find("pattern");
    if (pattern == json.end() || !pattern->is_object() ||
        !JsonString(*pattern, "String", "", &stage.pattern).ok() || stage.pattern.empty()) {
      return DecoderError(type, "only a non-empty {\"String\": ...} pattern is supported");
    }
    if (auto s = JsonString(json, "content", "decoder Replace", &stage.content); !s.ok()) return s;
  } else if (type == "Strip") {
    stage.kind = Kind::kStrip;
    std::string content;
    if (auto s = JsonString(json, "content", "decoder Strip", &content); !s.ok()) return s;
    size_t pos = 0;
    if (content.empty() || !IsValidUtf8(content) ||
        (stage.strip_char = NextCodePoint(content, &pos), pos != content.size())) {
      return DecoderError(type, "content must be one character");
    }
    const auto start = json.find("start");
    const auto stop = json.find("stop");
    if (start == json.end() || stop == json.end() || !start->is_number_unsigned() ||
        !stop->is_number_unsigned()) {
      return DecoderError(type, "start and stop must be non-negative integers");
    }
    // Counts past INT_MAX strip as much as INT_MAX does (everything); never wrap to negative.
    stage.strip_start = static_cast<int>(std::min<uint64_t>(start->get<uint64_t>(), INT_MAX));
    stage.strip_stop = static_cast<int>(std::min<uint64_t>(stop->get<uint64_t>(), INT_MAX));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "decoder type \"", type,
        "\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, "
        "Sequence)"));
  }
  const bool stream = !out->empty() && (out->back().stream || out->back().kind == Kind::kFuse ||
                                        out->back().kind == Kind::kByteLevel);
  if (stream && (stage.kind == Kind::kByteLevel || stage.kind == Kind::kByteFallback)) {
    return DecoderError(type, "after Fuse or ByteLevel is not supported");
  }
  stage.stream = stream;
  out->push_back(std::move(stage));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecoderPipeline> DecoderPipeline::Parse(const nlohmann::json& json) {
  DecoderPipeline pipeline;
  if (json.is_null()) {
    pipeline.join_with_space_ = true;
    return pipeline;
  }
  if (auto s = ParseStage(json, &pipeline.stages_); !s.ok()) return s;
  return pipeline;
}

DecoderState DecoderPipeline::NewState() const {
  DecoderState state;
  state.stages.resize(stages_.size());
  return state;
}

void DecoderPipeline::Push(std::string_view token, DecoderState* state, std::string* out) const {
  if (join_with_space_ && state->any_token) out->push_back(' ');
  state->any_token = true;
  PushToken(0, token, state, out);
}

void DecoderPipeline::Finish(DecoderState* state, std::string* out) const {
  if (!stages_.empty()) FinishStage(0, state, out);
}

void DecoderPipeline::PushToken(size_t index, std::string_view token, DecoderState* state,
                                std::string* out) const {
  if (index == stages_.size()) {
    out->append(token);
    return;
  }
  const Stage& stage = stages_[index];
  DecoderState::Stage& st = state->stages[index];
  if (stage.stream) {
    PushText(index, token, state, out);
    return;
  }
  switch (stage.kind) {
    case StageKind::kReplace:
      PushToken(index + 1, ReplaceAll(token, stage.pattern, stage.content), state, out);
      return;
    case StageKind::kStrip: {
      const size_t front = StripLength(token, stage.strip_char, stage.strip_start, false);
      const size_t back =
          StripLength(token.substr(front), stage.strip_char, stage.strip_stop, true);
      PushToken(index + 1, token.substr(front, token.size() - front - back), state, out);
      return;
    }
    case StageKind::kByteFallback: {
      uint8_t byte;
      if (ParseByteToken(token, &byte)) {
        st.pending.push_back(static_cast<char>(byte));
        return;
      }
      FlushBytes(index, state, out);
      PushToken(index + 1, token, state, out);
      return;
    }
    case StageKind::kFuse:
      PushText(index + 1, token, state, out);
      return;
    case StageKind::kByteLevel: {
      bool mappable = true;
      std::string bytes;
      for (size_t pos = 0; pos < token.size() && mappable;) {
        const int byte = CharToByte(NextCodePoint(token, &pos));
        mappable = byte >= 0;
        bytes.push_back(static_cast<char>(byte));
      }
      st.pending.append(mappable ? std::string_view(bytes) : token);
      std::string text;
      st.pending.erase(0, AppendUtf8Lossy(st.pending, /*final=*/false, &text));
      if (!text.empty()) PushText(index + 1, text, state, out);
      return;
    }
  }
}

void DecoderPipeline::PushText(size_t index, std::string_view text, DecoderState* state,
                               std::string* out) const {
  if (index == stages_.size()) {
    out->append(text);
    return;
  }
  const Stage& stage = stages_[index];
  DecoderState::Stage& st = state->stages[index];
  switch (stage.kind) {
    case StageKind::kFuse:
      PushText(index + 1, text, state, out);
      return;
    case StageKind::kReplace: {
      st.pending.append(text);
      std::string ready;
      size_t last = 0;
      for (size_t at = st.pending.find(stage.pattern); at != std::string::npos;
           at = st.pending.find(stage.pattern, last)) {
        absl::StrAppend(&ready, AbslView(std::string_view(st.pending).substr(last, at - last)),
                        stage.content);
        last = at + stage.pattern.size();
      }
      // Keep the longest tail that could still grow into a match.
      size_t keep = std::min(st.pending.size() - last, stage.pattern.size() - 1);
      while (keep > 0 &&
             !std::string_view(stage.pattern)
                  .starts_with(std::string_view(st.pending).substr(st.pending.size() - keep))) {
        --keep;
      }
      ready.append(st.pending, last, st.pending.size() - last - keep);
      st.pending.erase(0, st.pending.size() - keep);
      if (!ready.empty()) PushText(index + 1, ready, state, out);
      return;
    }
    case StageKind::kStrip: {
      st.pending.append(text);
      if (!st.started) {
        // The front of the whole string: wait until the leading run is decided.
        const size_t front = StripLength(st.pending, stage.strip_char, stage.strip_start, false);
        if (front == st.pending.size() && front < stage.strip_start * UnitLength(stage)) return;
        st.started = true;
        st.pending.erase(0, front);
      }
      // A trailing run of strip characters may end the string: hold it back.
      const size_t hold =
          stage.strip_stop > 0 ? StripLength(st.pending, stage.strip_char, INT_MAX, true) : 0;
      const std::string ready = st.pending.substr(0, st.pending.size() - hold);
      st.pending.erase(0, st.pending.size() - hold);
      if (!ready.empty()) PushText(index + 1, ready, state, out);
      return;
    }
    case StageKind::kByteFallback:
    case StageKind::kByteLevel:
      return;  // refused by Parse() in stream position
  }
}

void DecoderPipeline::FlushBytes(size_t index, DecoderState* state, std::string* out) const {
  DecoderState::Stage& st = state->stages[index];
  if (st.pending.empty()) return;
  const std::string bytes = std::move(st.pending);
  st.pending.clear();
  if (IsValidUtf8(bytes)) {
    PushToken(index + 1, bytes, state, out);
    return;
  }
  // The reference replaces every byte of an invalid group, not each maximal subpart.
  for (size_t i = 0; i < bytes.size(); ++i) PushToken(index + 1, kReplacementUtf8, state, out);
}

void DecoderPipeline::FinishStage(size_t index, DecoderState* state, std::string* out) const {
  const Stage& stage = stages_[index];
  DecoderState::Stage& st = state->stages[index];
  std::string flushed;
  if (stage.kind == StageKind::kByteFallback) {
    FlushBytes(index, state, out);
  } else if (stage.kind == StageKind::kByteLevel) {
    AppendUtf8Lossy(st.pending, /*final=*/true, &flushed);
  } else if (stage.stream && stage.kind == StageKind::kStrip) {
    if (!st.started) {
      st.pending.erase(0, StripLength(st.pending, stage.strip_char, stage.strip_start, false));
    }
    const size_t back = StripLength(st.pending, stage.strip_char, stage.strip_stop, true);
    flushed = st.pending.substr(0, st.pending.size() - back);
  } else if (stage.stream) {
    flushed = std::move(st.pending);
  }
  st.pending.clear();
  if (!flushed.empty()) PushText(index + 1, flushed, state, out);
  if (index + 1 < stages_.size()) FinishStage(index + 1, state, out);
}

}  // namespace mlaserve::tokenizer_internal
