// Matching of added tokens in text, with the semantics of the Hugging Face AddedVocabulary:
// leftmost-longest matches scanned left to right, then the single_word, lstrip and rstrip
// adjustments applied to each match in turn.

#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

// The code point that ends text[0, end), for the word-boundary test of single_word tokens.
char32_t LastCodePoint(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  return NextCodePoint(text, &pos);
}

// Start of the run of white space that ends `text`.
size_t TrailingSpaceStart(std::string_view text) {
  size_t start = text.size();
  while (start > 0) {
    size_t prev = start - 1;
    while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
    size_t pos = prev;
    if (!IsWhiteSpace(NextCodePoint(text, &pos))) break;
    start = prev;
  }
  return start;
}

// Length of the run of white space that starts `text`.
size_t LeadingSpaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhiteSpace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                                     const Normalizer* normalizer) {
  terminal_.push_back(-1);
  for (const AddedToken* token : tokens) {
    std::string text = normalizer != nullptr && token->normalized
                           ? normalizer->Normalize(token->content)
                           : token->content;
    if (text.empty()) continue;
    int32_t node = 0;
    for (const char c : text) {
      const uint64_t key = static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(c);
      const auto [it, inserted] = trie_.try_emplace(key, static_cast<int32_t>(terminal_.size()));
      if (inserted) terminal_.push_back(-1);
      node = it->second;
    }
    // The first of equal patterns wins, as in the reference automaton.
    if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(patterns_.size());
    first_byte_[static_cast<uint8_t>(text[0])] = true;
    patterns_.push_back({std::move(text), token});
  }
}

const AddedTokenMatcher::Pattern* AddedTokenMatcher::LongestAt(std::string_view text,
                                                               size_t pos) const {
  const Pattern* longest = nullptr;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = trie_.find(static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(text[i]));
    if (it == trie_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) longest = &patterns_[terminal_[node]];
  }
  return longest;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t emitted = 0;  // end of what the segments cover so far
  size_t pos = 0;
  while (!patterns_.empty() && pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const Pattern* match = LongestAt(text, pos);
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + match->text.size();
    pos = stop;
    const AddedToken& token = *match->token;
    if (token.single_word) {
      const bool word_before =
          start > 0 && IsRustWordCharacter(LastCodePoint(text.substr(0, start)));
      size_t next = stop;
      const bool word_after = stop < text.size() && IsRustWordCharacter(NextCodePoint(text, &next));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), emitted);
    if (token.rstrip) stop += LeadingSpaceLength(text.substr(stop));
    if (emitted < start) out->push_back({text.substr(emitted, start - emitted), -1});
    out->push_back({text.substr(start, stop - start), token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace mlaserve::tokenizer_internal
