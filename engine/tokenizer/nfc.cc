// Normalization Form C (Unicode Standard Annex #15): canonical decomposition, canonical
// ordering of combining marks, then canonical composition.

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

// Hangul syllables decompose and compose arithmetically (Unicode Standard, section 3.12).
constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr int kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr int kHangulNCount = kHangulVCount * kHangulTCount;
constexpr int kHangulSCount = kHangulLCount * kHangulNCount;

struct NfcTables {
  absl::flat_hash_map<char32_t, std::pair<char32_t, char32_t>> decompositions;
  absl::flat_hash_map<uint64_t, char32_t> compositions;  // first << 32 | second
  // Code points that can combine with a preceding character; text without them, without
  // decomposable characters and without combining marks is already in NFC.
  absl::flat_hash_set<char32_t> second_of_pair;
};

const NfcTables& Tables() {
  static const NfcTables* tables = [] {
    auto* t = new NfcTables;
    for (int i = 0; i < kDecompositionCount; ++i) {
      const Decomposition& d = kDecompositions[i];
      t->decompositions[d.code_point] = {d.first, d.second};
      if (d.composes) {
        t->compositions[uint64_t{d.first} << 32 | d.second] = d.code_point;
        t->second_of_pair.insert(d.second);
      }
    }
    return t;
  }();
  return *tables;
}

bool IsHangulSyllable(char32_t c) { return c >= kHangulSBase && c < kHangulSBase + kHangulSCount; }

// True when the code point can never change under NFC whatever surrounds it.
bool IsNfcStable(char32_t c, const NfcTables& t) {
  if (c < 0x300) return true;
  if (IsHangulSyllable(c)) return false;
  if (c >= kHangulVBase && c < kHangulTBase + kHangulTCount) return false;  // V and T jamo
  return CombiningClass(c) == 0 && !t.decompositions.contains(c) && !t.second_of_pair.contains(c);
}

void Decompose(char32_t c, const NfcTables& t, std::vector<char32_t>* out) {
  if (IsHangulSyllable(c)) {
    const int index = static_cast<int>(c - kHangulSBase);
    out->push_back(kHangulLBase + index / kHangulNCount);
    out->push_back(kHangulVBase + (index % kHangulNCount) / kHangulTCount);
    if (index % kHangulTCount != 0) out->push_back(kHangulTBase + index % kHangulTCount);
    return;
  }
  const auto it = t.decompositions.find(c);
  if (it == t.decompositions.end()) {
    out->push_back(c);
    return;
  }
  Decompose(it->second.first, t, out);
  if (it->second.second != 0) Decompose(it->second.second, t, out);
}

// Returns the primary composite of (first, second), or 0 when there is none.
char32_t Compose(char32_t first, char32_t second, const NfcTables& t) {
  if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
      second < kHangulVBase + kHangulVCount) {
    return kHangulSBase +
           ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
  }
  if (IsHangulSyllable(first) && (first - kHangulSBase) % kHangulTCount == 0 &&
      second > kHangulTBase && second < kHangulTBase + kHangulTCount) {
    return first + (second - kHangulTBase);
  }
  const auto it = t.compositions.find(uint64_t{first} << 32 | second);
  return it == t.compositions.end() ? 0 : it->second;
}

}  // namespace

std::string ToNfc(std::string_view text) {
  const NfcTables& t = Tables();
  std::vector<char32_t> code_points;
  bool stable = true;
  for (size_t pos = 0; pos < text.size();) {
    const char32_t c = NextCodePoint(text, &pos);
    stable = stable && IsNfcStable(c, t);
    Decompose(c, t, &code_points);
  }
  if (stable) return std::string(text);

  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < code_points.size();) {
    if (CombiningClass(code_points[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < code_points.size() && CombiningClass(code_points[end]) != 0) ++end;
    std::stable_sort(code_points.begin() + i, code_points.begin() + end,
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = end;
  }

  // Canonical composition: a character combines with the last starter unless a character
  // between them has class 0 or a class at least its own (it is then "blocked").
  std::vector<char32_t> composed;
  composed.reserve(code_points.size());
  size_t starter = 0;
  bool have_starter = false;
  int last_class = 0;
  for (const char32_t c : code_points) {
    const int cc = CombiningClass(c);
    if (have_starter) {
      const bool adjacent = composed.size() == starter + 1;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (const char32_t p = Compose(composed[starter], c, t); p != 0) {
          composed[starter] = p;
          continue;
        }
      }
    }
    if (cc == 0) {
      starter = composed.size();
      have_starter = true;
    }
    last_class = cc;
    composed.push_back(c);
  }
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : composed) AppendUtf8(c, &out);
  return out;
}

}  // namespace mlaserve::tokenizer_internal
