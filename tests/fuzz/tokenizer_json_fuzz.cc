// Fuzzes Tokenizer::Parse (engine/tokenizer/tokenizer.h) with arbitrary tokenizer.json text. Every input
// must come back as a Tokenizer or an error Status; an accepted tokenizer must then encode and
// decode a fixed text without failing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto tokenizer = mlaserve::Tokenizer::Parse(text, /*config_json=*/"");
  if (!tokenizer.ok()) return 0;
  const std::vector<int32_t> ids = (*tokenizer)->Encode("Hello, world! 123 \xF0\x9F\x98\x80", true);
  for (const int32_t id : ids) FUZZ_CHECK(id >= 0 && id < (*tokenizer)->vocab_size());
  (*tokenizer)->Decode(ids, /*skip_special_tokens=*/false);
  return 0;
}
