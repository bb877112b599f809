// A backtracking regular-expression matcher over code points, for the subset of Oniguruma syntax
// that tokenizer.json pre-tokenizer patterns use: literals, `.`, classes with ranges and
// negation, \s \S \d \D \w \W, \p{..} \P{..} general categories, groups (capturing groups are
// treated as non-capturing), alternation, greedy / lazy / possessive quantifiers including
// {n,m}, (?i) and (?i:..) case-insensitive scopes (simple case folding) and lookahead (?=..)
// (?!..). Anything else (anchors, lookbehind, backreferences, scripts) is refused at compile
// time with an error naming the construct. Semantics are Oniguruma's: leftmost match,
// alternatives and quantifiers tried in priority order.
//
// A compiled Regex is immutable; Find() is const and safe to call from many threads.

#ifndef MLASERVE_ENGINE_TOKENIZER_REGEX_H_
#define MLASERVE_ENGINE_TOKENIZER_REGEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {

// One element of a character class.
struct CharSetItem {
  enum class Kind : uint8_t {
    kRange,          // first..last
    kCategories,     // general category in mask
    kNotCategories,  // general category not in mask
    kWhiteSpace,     // \s
    kNotWhiteSpace,  // \S
    kWord,           // \w
    kNotWord,        // \W
  };
  Kind kind;
  char32_t first = 0;
  char32_t last = 0;
  CategoryMask mask = 0;
};

// A set of code points: the union of its items, optionally negated, optionally closed under
// simple case folding. Membership of Basic Multilingual Plane code points is a bitmap lookup.
class CharSet {
 public:
  CharSet(std::vector<CharSetItem> items, bool negated, bool case_insensitive);

  bool Contains(char32_t c) const {
    if (c < 0x10000) return (bmp_[c >> 6] >> (c & 63)) & 1;
    return ContainsSlow(c);
  }

 private:
  static bool ItemContains(const CharSetItem& item, char32_t c);
  bool ItemsContain(char32_t c) const;
  bool ContainsSlow(char32_t c) const;

  std::vector<CharSetItem> items_;
  bool negated_;
  bool case_insensitive_;
  std::vector<uint64_t> bmp_;  // 65536 bits
};

class Regex {
 public:
  // Compiles `pattern` (UTF-8). The error names the unsupported construct and its offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);

  // Finds the leftmost non-empty match starting at or after `from` in text[0, size).
  // Lookahead sees the whole text. Returns false when there is none.
  bool Find(const char32_t* text, size_t size, size_t from, size_t* begin, size_t* end) const;

  // Program representation, public for the compiler in tokenizer_regex.cc.
  struct Inst {
    enum class Op : uint8_t { kSet, kSplit, kJump, kRepeat, kLook, kMatch };
    enum class Greed : uint8_t { kGreedy, kLazy, kPossessive };
    Op op;
    Greed greed = Greed::kGreedy;
    bool negated = false;  // kLook: (?!..)
    int32_t x = 0;         // kSet/kRepeat: set index; kSplit: preferred; kJump, kLook: target
    int32_t y = 0;         // kSplit: alternative
    uint32_t min = 0;      // kRepeat
    uint32_t max = 0;      // kRepeat; kUnbounded for no limit
  };
  static constexpr uint32_t kUnbounded = 0xFFFFFFFF;

  Regex(std::vector<Inst> program, std::vector<CharSet> sets, CharSet first);

 private:
  struct Backtrack;
  // Runs the program from `pc` at `pos`; returns the match end or -1.
  int64_t Run(int32_t pc, size_t pos, const char32_t* text, size_t size,
              std::vector<Backtrack>* stack) const;

  std::vector<Inst> program_;
  std::vector<CharSet> sets_;
  CharSet first_;  // code points that can start a match (all when the pattern can match empty)
};

}  // namespace mlaserve::tokenizer_internal

#endif  // MLASERVE_ENGINE_TOKENIZER_REGEX_H_
