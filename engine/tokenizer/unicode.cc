#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

#include "absl/container/flat_hash_map.h"

namespace mlaserve::tokenizer_internal {
namespace {

// Index of the last run whose first code point is <= c, for tables packed as first << shift.
int FindRun(const uint32_t* runs, int count, int shift, char32_t c) {
  const uint32_t key = (static_cast<uint32_t>(c) << shift) | ((1u << shift) - 1);
  return static_cast<int>(std::upper_bound(runs, runs + count, key) - runs) - 1;
}

// Categories of the Basic Multilingual Plane, flattened: nearly all text is BMP and the tokenizer
// asks for a category per character, so one array load beats a binary search.
const std::array<uint8_t, 0x10000>& BmpCategories() {
  static const auto* table = [] {
    auto* t = new std::array<uint8_t, 0x10000>;
    for (int i = 0; i < kCategoryRunCount; ++i) {
      const uint32_t first = kCategoryRuns[i] >> 5;
      if (first >= 0x10000) break;
      const uint32_t end = i + 1 < kCategoryRunCount
                               ? std::min<uint32_t>(kCategoryRuns[i + 1] >> 5, 0x10000)
                               : 0x10000;
      std::fill(t->begin() + first, t->begin() + end, kCategoryRuns[i] & 31);
    }
    return t;
  }();
  return *table;
}

bool InRanges(const CodePointRange* ranges, int count, char32_t c) {
  const CodePointRange* end = ranges + count;
  const CodePointRange* it = std::upper_bound(
      ranges, end, c, [](char32_t v, const CodePointRange& r) { return v < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

struct FoldTables {
  absl::flat_hash_map<char32_t, char32_t> fold;
  absl::flat_hash_map<char32_t, std::vector<char32_t>> variants;  // fold target -> sources
  std::vector<std::vector<char32_t>> groups;
};

const FoldTables& Folds() {
  static const FoldTables* tables = [] {
    auto* t = new FoldTables;
    for (int i = 0; i < kCaseFoldRunCount; ++i) {
      const CaseFoldRun& run = kCaseFoldRuns[i];
      for (uint32_t k = 0; k < run.count; ++k) {
        const char32_t from = run.start + k * run.stride;
        const char32_t to = static_cast<char32_t>(static_cast<int32_t>(from) + run.delta);
        t->fold[from] = to;
        t->variants[to].push_back(from);
      }
    }
    for (const auto& [to, from] : t->variants) {
      t->groups.push_back(from);
      t->groups.back().push_back(to);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

Category GetCategory(char32_t c) {
  if (c < 0x10000) return static_cast<Category>(BmpCategories()[c]);
  if (c > kMaxCodePoint) return Category::kCn;
  return static_cast<Category>(kCategoryRuns[FindRun(kCategoryRuns, kCategoryRunCount, 5, c)] & 31);
}

bool IsWhiteSpace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return InRanges(kWhiteSpaceRanges, kWhiteSpaceRangeCount, c);
}

bool IsRustWordCharacter(char32_t c) {
  constexpr CategoryMask kWordMask = kLetterMask | kMarkMask | CategoryBit(Category::kNd) |
                                     CategoryBit(Category::kNl) | CategoryBit(Category::kPc);
  return InCategories(c, kWordMask) || c == 0x200C || c == 0x200D ||
         InRanges(kOtherAlphabeticRanges, kOtherAlphabeticRangeCount, c);
}

char32_t SimpleCaseFold(char32_t c) {
  const auto& fold = Folds().fold;
  const auto it = fold.find(c);
  return it == fold.end() ? c : it->second;
}

std::vector<char32_t> CaseVariants(char32_t c) {
  const char32_t folded = SimpleCaseFold(c);
  std::vector<char32_t> out = {folded};
  const auto& variants = Folds().variants;
  if (const auto it = variants.find(folded); it != variants.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

const std::vector<std::vector<char32_t>>& CaseFoldGroups() { return Folds().groups; }

int CombiningClass(char32_t c) {
  if (c < 0x300) return 0;
  return kCccRuns[FindRun(kCccRuns, kCccRunCount, 8, c)] & 0xFF;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

int ValidSequenceLength(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  const unsigned b0 = p[0];
  if (b0 < 0x80) return 1;
  int length;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<size_t>(i) >= n) return -1;
    const unsigned b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return length;
}

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int length = ValidSequenceLength(bytes.substr(pos));
    if (length > 0) {
      out->append(bytes.data() + pos, length);
      pos += length;
      continue;
    }
    if (length < 0 && !final) break;
    // A maximal invalid subpart: the lead byte plus the continuation bytes that were accepted.
    size_t skip = 1;
    while (pos + skip < bytes.size() && skip < 3 &&
           ValidSequenceLength(bytes.substr(pos, skip + 1)) < 0) {
      ++skip;
    }
    AppendUtf8(kReplacementCharacter, out);
    pos += skip;
  }
  return pos;
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int length = ValidSequenceLength(text.substr(pos));
    if (length <= 0) return false;
    pos += length;
  }
  return true;
}

void DecodeUtf8(std::string_view text, std::vector<char32_t>* code_points,
                std::vector<uint32_t>* offsets) {
  code_points->clear();
  offsets->clear();
  size_t pos = 0;
  while (pos < text.size()) {
    offsets->push_back(static_cast<uint32_t>(pos));
    code_points->push_back(NextCodePoint(text, &pos));
  }
  offsets->push_back(static_cast<uint32_t>(text.size()));
}

}  // namespace mlaserve::tokenizer_internal
