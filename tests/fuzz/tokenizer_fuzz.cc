// Fuzzes Tokenizer::Encode, Decode and DecodeStream (engine/tokenizer/tokenizer.h) over the embedded
// default model's tokenizer (byte-level BPE, no normalizer) with arbitrary bytes, invalid
// UTF-8 included. Checked: ids lie in the vocabulary; decoding the encoding gives the input
// back (after U+FFFD replacement of invalid UTF-8); decoding arbitrary ids gives valid UTF-8,
// and so does every piece the streaming decoder releases.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const mlaserve::Tokenizer& DefaultTokenizer() {
  static const mlaserve::Tokenizer* const tokenizer = [] {
    auto loaded = mlaserve::Tokenizer::Load(MLASERVE_SOURCE_DIR "/models/mlaserve-tiny-moe");
    FUZZ_CHECK(loaded.ok());
    return loaded->release();
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mlaserve::Tokenizer& tokenizer = DefaultTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special_tokens=*/false);
  for (const int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  std::string expected;
  mlaserve::tokenizer_internal::AppendUtf8Lossy(text, /*final=*/true, &expected);
  FUZZ_CHECK(tokenizer.Decode(ids, /*skip_special_tokens=*/false) == expected);
  tokenizer.Encode(text, /*add_special_tokens=*/true);

  // The same bytes read as ids, most of them out of the vocabulary.
  std::vector<int32_t> raw_ids(size / sizeof(int32_t));
  if (!raw_ids.empty()) std::memcpy(raw_ids.data(), data, raw_ids.size() * sizeof(int32_t));
  for (int32_t& id : raw_ids) id %= static_cast<int32_t>(tokenizer.vocab_size() + 8);
  for (const bool skip_special : {false, true}) {
    FUZZ_CHECK(mlaserve::tokenizer_internal::IsValidUtf8(tokenizer.Decode(raw_ids, skip_special)));
    // Every piece the streaming decoder releases is valid UTF-8 on its own.
    mlaserve::Tokenizer::DecodeStream stream = tokenizer.NewDecodeStream(skip_special);
    for (const int32_t id : raw_ids) {
      std::string piece;
      stream.Add(id, &piece);
      FUZZ_CHECK(mlaserve::tokenizer_internal::IsValidUtf8(piece));
    }
  }
  return 0;
}
