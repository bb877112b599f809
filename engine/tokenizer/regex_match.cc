// Character sets and the backtracking interpreter of tokenizer_regex.h.

#include <utility>

#include "engine/tokenizer/regex.h"

namespace mlaserve::tokenizer_internal {

CharSet::CharSet(std::vector<CharSetItem> items, bool negated, bool case_insensitive)
    : items_(std::move(items)),
      negated_(negated),
      case_insensitive_(case_insensitive),
      bmp_(0x10000 / 64, 0) {
  auto set_bit = [this](char32_t c) { bmp_[c >> 6] |= uint64_t{1} << (c & 63); };
  for (const CharSetItem& item : items_) {
    if (item.kind == CharSetItem::Kind::kRange) {
      for (char32_t c = item.first; c <= item.last && c < 0x10000; ++c) set_bit(c);
      continue;
    }
    for (char32_t c = 0; c < 0x10000; ++c) {
      if (ItemContains(item, c)) set_bit(c);
    }
  }
  if (case_insensitive_) {
    // c matches when any code point with the same case fold does.
    for (const std::vector<char32_t>& group : CaseFoldGroups()) {
      bool any = false;
      for (const char32_t c : group) any = any || (c < 0x10000 && Contains(c));
      if (!any) continue;
      for (const char32_t c : group) {
        if (c < 0x10000) set_bit(c);
      }
    }
  }
  if (negated_) {
    for (uint64_t& word : bmp_) word = ~word;
  }
}

bool CharSet::ItemContains(const CharSetItem& item, char32_t c) {
  switch (item.kind) {
    case CharSetItem::Kind::kRange:
      return c >= item.first && c <= item.last;
    case CharSetItem::Kind::kCategories:
      return InCategories(c, item.mask);
    case CharSetItem::Kind::kNotCategories:
      return !InCategories(c, item.mask);
    case CharSetItem::Kind::kWhiteSpace:
      return IsWhiteSpace(c);
    case CharSetItem::Kind::kNotWhiteSpace:
      return !IsWhiteSpace(c);
    case CharSetItem::Kind::kWord:
      return IsRustWordCharacter(c);
    case CharSetItem::Kind::kNotWord:
      return !IsRustWordCharacter(c);
  }
  return false;
}

bool CharSet::ItemsContain(char32_t c) const {
  for (const CharSetItem& item : items_) {
    if (ItemContains(item, c)) return true;
  }
  return false;
}

bool CharSet::ContainsSlow(char32_t c) const {
  bool contained = ItemsContain(c);
  if (case_insensitive_) {
    for (const char32_t v : CaseVariants(c)) contained = contained || ItemsContain(v);
  }
  return contained != negated_;
}

Regex::Regex(std::vector<Inst> program, std::vector<CharSet> sets, CharSet first)
    : program_(std::move(program)), sets_(std::move(sets)), first_(std::move(first)) {}

struct Regex::Backtrack {
  enum class Kind : uint8_t { kSplit, kGreedy, kLazy };
  int32_t pc;  // kSplit: where to resume; kGreedy, kLazy: the kRepeat instruction
  Kind kind;
  uint32_t pos;    // kSplit: position to resume at; repeats: where the repetition started
  uint32_t count;  // repeats: code points currently taken
};

int64_t Regex::Run(int32_t pc, size_t pos, const char32_t* text, size_t size,
                   std::vector<Backtrack>* stack) const {
  const size_t base = stack->size();
  for (;;) {
    const Inst& inst = program_[pc];
    bool ok = true;
    switch (inst.op) {
      case Inst::Op::kSet:
        ok = pos < size && sets_[inst.x].Contains(text[pos]);
        ++pos;
        ++pc;
        break;
      case Inst::Op::kSplit:
        stack->push_back({inst.y, Backtrack::Kind::kSplit, static_cast<uint32_t>(pos), 0});
        pc = inst.x;
        break;
      case Inst::Op::kJump:
        pc = inst.x;
        break;
      case Inst::Op::kRepeat: {
        const CharSet& set = sets_[inst.x];
        const uint32_t limit = inst.greed == Inst::Greed::kLazy ? inst.min : inst.max;
        uint32_t count = 0;
        while (count < limit && pos + count < size && set.Contains(text[pos + count])) ++count;
        if (count < inst.min) {
          ok = false;
          break;
        }
        if (inst.greed == Inst::Greed::kGreedy && count > inst.min) {
          stack->push_back({pc, Backtrack::Kind::kGreedy, static_cast<uint32_t>(pos), count});
        } else if (inst.greed == Inst::Greed::kLazy && count < inst.max) {
          stack->push_back({pc, Backtrack::Kind::kLazy, static_cast<uint32_t>(pos), count});
        }
        pos += count;
        ++pc;
        break;
      }
      case Inst::Op::kLook: {
        const bool matched = Run(inst.x, pos, text, size, stack) >= 0;
        ok = matched != inst.negated;
        ++pc;
        break;
      }
      case Inst::Op::kMatch:
        stack->resize(base);
        return static_cast<int64_t>(pos);
    }
    while (!ok) {
      if (stack->size() == base) return -1;
      Backtrack& top = stack->back();
      if (top.kind == Backtrack::Kind::kSplit) {
        pc = top.pc;
        pos = top.pos;
        stack->pop_back();
        ok = true;
        break;
      }
      const Inst& repeat = program_[top.pc];
      if (top.kind == Backtrack::Kind::kGreedy) {
        --top.count;
      } else if (top.pos + top.count < size &&
                 sets_[repeat.x].Contains(text[top.pos + top.count])) {
        ++top.count;
      } else {
        stack->pop_back();
        continue;
      }
      pc = top.pc + 1;
      pos = top.pos + top.count;
      ok = true;
      const bool exhausted =
          top.kind == Backtrack::Kind::kGreedy ? top.count == repeat.min : top.count == repeat.max;
      if (exhausted) stack->pop_back();
    }
  }
}

bool Regex::Find(const char32_t* text, size_t size, size_t from, size_t* begin, size_t* end) const {
  thread_local std::vector<Backtrack> stack;
  for (size_t start = from; start < size; ++start) {
    if (!first_.Contains(text[start])) continue;
    stack.clear();
    const int64_t match_end = Run(0, start, text, size, &stack);
    if (match_end > static_cast<int64_t>(start)) {
      *begin = start;
      *end = static_cast<size_t>(match_end);
      return true;
    }
  }
  return false;
}

}  // namespace mlaserve::tokenizer_internal
