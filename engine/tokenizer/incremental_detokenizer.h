// IncrementalDetokenizer: turns generated token ids, fed one at a time, into text deltas, and
// matches stop strings on the decoded text across token boundaries.
//
// Guarantees:
//  - Every delta is valid UTF-8 and never splits a code point: bytes of an incomplete
//    character are held back; at Finish() a trailing incomplete character becomes U+FFFD.
//  - Without a stop match, the concatenation of all deltas equals
//    Tokenizer::Decode(all ids, skip_special_tokens).
//  - Text that could be the beginning of a stop string is held back until it is known not to
//    be. When a stop string appears, the output ends just before it (just after it with
//    include_stop_str_in_output) and nothing later is released. If several stop strings
//    appear, the one that is complete first in the text wins (for equal ends, the longer
//    one), so the result does not depend on how the text is split into tokens.
//
// Thread-compatible: one instance per sequence. The Tokenizer must outlive it.

#ifndef MLASERVE_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
#define MLASERVE_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace mlaserve {

struct DetokenizerOptions {
  // Special tokens (eos, chat markers) are control symbols, not text, by default.
  bool skip_special_tokens = true;
  std::vector<std::string> stop;  // stop strings; empty strings are ignored
  bool include_stop_str_in_output = false;
};

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options);

  // Adds the next id and appends the text it releases to *out. Returns the stop string this id
  // completed, if any; from then on Add() and Finish() release nothing.
  std::optional<std::string> Add(int32_t id, std::string* out);

  // Appends all text still held back. Returns the stop string the flushed text completed, if
  // any. Call once, after the last Add().
  std::optional<std::string> Finish(std::string* out);

  bool stopped() const { return matched_stop_.has_value(); }
  // The stop string that ended the output, if one did.
  const std::optional<std::string>& matched_stop() const { return matched_stop_; }

 private:
  // Releases from held_ what no stop string can still claim.
  std::optional<std::string> Release(bool final, std::string* out);

  Tokenizer::DecodeStream stream_;
  DetokenizerOptions options_;
  std::string held_;  // decoded text not yet released
  std::optional<std::string> matched_stop_;
  bool finished_ = false;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
