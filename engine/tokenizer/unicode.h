// Unicode support for the tokenizer: UTF-8 coding, general categories, the White_Space and
// Alphabetic properties, simple case folding and NFC. The data tables are generated from the
// Unicode Character Database by tools/tokenizer/gen_unicode_tables.py.
//
// All functions are pure and thread-safe; lookup structures are built once on first use.

#ifndef MLASERVE_ENGINE_TOKENIZER_UNICODE_H_
#define MLASERVE_ENGINE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace mlaserve::tokenizer_internal {

// This Abseil build has its own string_view type; Abseil APIs (StrCat, heterogeneous hash-map
// lookup) are given this conversion.
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

// Unicode general categories, in the order the generated tables use.
enum class Category : uint8_t {
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
  kCn,
};

// A set of categories, one bit per Category value.
using CategoryMask = uint32_t;
constexpr CategoryMask CategoryBit(Category c) { return CategoryMask{1} << static_cast<int>(c); }
constexpr CategoryMask kLetterMask = 0x1F;             // Lu Ll Lt Lm Lo
constexpr CategoryMask kMarkMask = 0x7 << 5;           // Mn Mc Me
constexpr CategoryMask kNumberMask = 0x7 << 8;         // Nd Nl No
constexpr CategoryMask kPunctuationMask = 0x7F << 11;  // Pc Pd Ps Pe Pi Pf Po
constexpr CategoryMask kSymbolMask = 0xF << 18;        // Sm Sc Sk So
constexpr CategoryMask kSeparatorMask = 0x7 << 22;     // Zs Zl Zp
constexpr CategoryMask kOtherMask = 0x1F << 25;        // Cc Cf Cs Co Cn

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacementCharacter = 0xFFFD;

Category GetCategory(char32_t c);
inline bool InCategories(char32_t c, CategoryMask mask) {
  return (mask >> static_cast<int>(GetCategory(c))) & 1;
}

// The White_Space property: Oniguruma's and Rust's \s, and Rust's char::is_whitespace.
bool IsWhiteSpace(char32_t c);
// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool IsRustWordCharacter(char32_t c);
// Simple (one code point) case folding, CaseFolding.txt statuses C and S.
char32_t SimpleCaseFold(char32_t c);
// Every code point whose simple case fold equals SimpleCaseFold(c), c included.
std::vector<char32_t> CaseVariants(char32_t c);
// The classes of code points sharing a simple case fold, for classes of two or more.
const std::vector<std::vector<char32_t>>& CaseFoldGroups();
// Canonical combining class.
int CombiningClass(char32_t c);

// Normalization Form C. REQUIRES: `text` is valid UTF-8.
std::string ToNfc(std::string_view text);

// UTF-8.
// Decodes the code point at text[*pos] and advances *pos past it. REQUIRES: valid UTF-8.
inline char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + *pos;
  if (p[0] < 0x80) {
    ++*pos;
    return p[0];
  }
  if (p[0] < 0xE0) {
    *pos += 2;
    return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
  }
  if (p[0] < 0xF0) {
    *pos += 3;
    return (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
  }
  *pos += 4;
  return (char32_t{p[0] & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
         (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
}
void AppendUtf8(char32_t c, std::string* out);
// Length of the valid UTF-8 sequence starting at bytes[0]; 0 when the first bytes are invalid,
// -1 when they are a valid but incomplete start (more bytes could complete them).
int ValidSequenceLength(std::string_view bytes);
// Appends `bytes` as text, replacing each maximal invalid subpart with U+FFFD exactly as
// Rust's String::from_utf8_lossy does. With `final == false` a trailing incomplete sequence is
// left unconsumed; returns the number of bytes consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);
// True when `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);
// Decodes valid UTF-8 into code points and the byte offset of each (plus the end offset).
void DecodeUtf8(std::string_view text, std::vector<char32_t>* code_points,
                std::vector<uint32_t>* offsets);

// Element types of the generated tables.
struct CodePointRange {
  uint32_t first;
  uint32_t last;
};
struct CaseFoldRun {  // code points start, start + stride, ... (count of them) fold to cp + delta
  uint32_t start;
  uint32_t count;
  int32_t delta;
  uint32_t stride;
};
struct Decomposition {  // canonical decomposition into one or two code points
  uint32_t code_point;
  uint32_t first;
  uint32_t second;    // 0 for a singleton
  uint32_t composes;  // 1 when the pair is a primary composite (not composition-excluded)
};

extern const int kCategoryRunCount;
extern const uint32_t kCategoryRuns[];  // first code point << 5 | Category, ascending
extern const int kCccRunCount;
extern const uint32_t kCccRuns[];  // first code point << 8 | combining class, ascending
extern const int kDecompositionCount;
extern const Decomposition kDecompositions[];
extern const int kWhiteSpaceRangeCount;
extern const CodePointRange kWhiteSpaceRanges[];
extern const int kOtherAlphabeticRangeCount;
extern const CodePointRange kOtherAlphabeticRanges[];  // Other_Alphabetic minus marks
extern const int kCaseFoldRunCount;
extern const CaseFoldRun kCaseFoldRuns[];

}  // namespace mlaserve::tokenizer_internal

#endif  // MLASERVE_ENGINE_TOKENIZER_UNICODE_H_
