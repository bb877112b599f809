// Helpers shared by the tokenizer components: the byte-level alphabet and JSON field access.

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

struct ByteLevelAlphabet {
  std::array<char32_t, 256> to_char;
  std::array<int16_t, 324> to_byte;  // every mapped character is below U+0144
};

const ByteLevelAlphabet& Alphabet() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    a.to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      a.to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      a.to_byte[a.to_char[b]] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return alphabet;
}

}  // namespace

char32_t ByteToChar(uint8_t byte) { return Alphabet().to_char[byte]; }

int CharToByte(char32_t c) {
  const auto& to_byte = Alphabet().to_byte;
  return c < to_byte.size() ? to_byte[c] : -1;
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  for (const char b : bytes) AppendUtf8(ByteToChar(static_cast<uint8_t>(b)), out);
}

absl::Status JsonBool(const nlohmann::json& object, const char* key, bool fallback,
                      std::string_view where, bool* out) {
  *out = fallback;
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(where), ".", key, " must be a boolean"));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status JsonString(const nlohmann::json& object, const char* key, std::string_view where,
                        std::string* out) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(where), ".", key, " must be a string"));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

std::optional<int32_t> JsonTokenId(const nlohmann::json& json) {
  // Non-negative integers parse as unsigned, negative ones as signed.
  if (json.is_number_unsigned() && json.get<uint64_t>() <= kMaxTokenId) {
    return static_cast<int32_t>(json.get<uint64_t>());
  }
  return std::nullopt;
}

}  // namespace mlaserve::tokenizer_internal
