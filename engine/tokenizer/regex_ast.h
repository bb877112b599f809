// The syntax tree shared by the regex parser (tokenizer_regex_parse.cc) and the compiler
// (tokenizer_regex.cc). Internal to the regex engine.

#ifndef MLASERVE_ENGINE_TOKENIZER_REGEX_AST_H_
#define MLASERVE_ENGINE_TOKENIZER_REGEX_AST_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/regex.h"

namespace mlaserve::tokenizer_internal {

struct RegexNode {
  enum class Kind { kEmpty, kSet, kConcat, kAlternate, kRepeat, kLookahead };
  Kind kind = Kind::kEmpty;
  int set = 0;  // kSet: index into the sets
  std::vector<std::unique_ptr<RegexNode>> children;
  uint32_t min = 0;  // kRepeat
  uint32_t max = 0;  // kRepeat; Regex::kUnbounded for no limit
  Regex::Inst::Greed greed = Regex::Inst::Greed::kGreedy;
  bool negated = false;  // kLookahead: (?!..)
};

// Parses `pattern` (valid UTF-8); the character sets of its atoms are appended to *sets.
absl::StatusOr<std::unique_ptr<RegexNode>> ParseRegex(std::string_view pattern,
                                                      std::vector<CharSet>* sets);

}  // namespace mlaserve::tokenizer_internal

#endif  // MLASERVE_ENGINE_TOKENIZER_REGEX_AST_H_
