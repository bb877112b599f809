// Regex parsing: Oniguruma syntax (the subset tokenizer_regex.h lists) to a RegexNode tree.

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/regex_ast.h"

namespace mlaserve::tokenizer_internal {
namespace {

using Greed = Regex::Inst::Greed;
using Node = RegexNode;

std::unique_ptr<Node> MakeNode(Node::Kind kind) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  return node;
}

struct CategoryName {
  const char* name;
  CategoryMask mask;
};
constexpr CategoryName kCategoryNames[] = {
    {"L", kLetterMask},
    {"Letter", kLetterMask},
    {"M", kMarkMask},
    {"Mark", kMarkMask},
    {"N", kNumberMask},
    {"Number", kNumberMask},
    {"P", kPunctuationMask},
    {"Punctuation", kPunctuationMask},
    {"S", kSymbolMask},
    {"Symbol", kSymbolMask},
    {"Z", kSeparatorMask},
    {"Separator", kSeparatorMask},
    {"C", kOtherMask},
    {"Other", kOtherMask},
    {"LC", 0x7},
};
constexpr const char* kShortCategories[] = {
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<CharSet>* sets) : sets_(sets) {
    for (size_t pos = 0; pos < pattern.size();) p_.push_back(NextCodePoint(pattern, &pos));
  }

  absl::StatusOr<std::unique_ptr<Node>> Parse() {
    auto node = ParseAlternation();
    if (i_ < p_.size()) Fail("unbalanced ')'");
    if (!error_.ok()) return error_;
    return node;
  }

 private:
  bool AtEnd() const { return i_ >= p_.size(); }
  bool Peek(char32_t c) const { return i_ < p_.size() && p_[i_] == c; }
  bool Consume(char32_t c) {
    if (!Peek(c)) return false;
    ++i_;
    return true;
  }
  std::unique_ptr<Node> Fail(std::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat(
          "regex: ", AbslView(what), " at code point offset ", i_, " is not supported"));
    }
    return MakeNode(Node::Kind::kEmpty);
  }

  std::unique_ptr<Node> AddSet(std::vector<CharSetItem> items, bool negated) {
    sets_->emplace_back(std::move(items), negated, case_insensitive_);
    auto node = MakeNode(Node::Kind::kSet);
    node->set = static_cast<int>(sets_->size()) - 1;
    return node;
  }

  std::unique_ptr<Node> ParseAlternation() {
    auto first = ParseConcat();
    if (!Peek('|')) return first;
    auto alt = MakeNode(Node::Kind::kAlternate);
    alt->children.push_back(std::move(first));
    while (Consume('|')) alt->children.push_back(ParseConcat());
    return alt;
  }

  std::unique_ptr<Node> ParseConcat() {
    auto concat = MakeNode(Node::Kind::kConcat);
    // An inline (?i) lasts to the end of the enclosing group, across alternatives: only
    // ParseGroup restores the flag.
    while (!AtEnd() && !Peek('|') && !Peek(')') && error_.ok()) {
      if (auto atom = ParseQuantified()) concat->children.push_back(std::move(atom));
    }
    return concat;
  }

  // Returns nullptr for an inline flag group, which produces no node.
  std::unique_ptr<Node> ParseQuantified() {
    auto atom = ParseAtom();
    if (atom == nullptr) return nullptr;
    uint32_t min, max;
    if (!ParseQuantifier(&min, &max)) return atom;
    auto repeat = MakeNode(Node::Kind::kRepeat);
    repeat->min = min;
    repeat->max = max;
    if (Consume('?')) {
      repeat->greed = Greed::kLazy;
    } else if (Consume('+')) {
      repeat->greed = Greed::kPossessive;
    }
    repeat->children.push_back(std::move(atom));
    if (ParseQuantifier(&min, &max)) return Fail("a repeated quantifier");
    return repeat;
  }

  bool ParseQuantifier(uint32_t* min, uint32_t* max) {
    if (Consume('*')) return *min = 0, *max = Regex::kUnbounded, true;
    if (Consume('+')) return *min = 1, *max = Regex::kUnbounded, true;
    if (Consume('?')) return *min = 0, *max = 1, true;
    if (!Peek('{')) return false;
    // An interval that does not parse is a literal '{', as in Oniguruma.
    size_t j = i_ + 1;
    auto number = [&](uint32_t* value) {
      const size_t start = j;
      *value = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && *value < 100000) {
        *value = *value * 10 + (p_[j++] - '0');
      }
      return j > start;
    };
    uint32_t lo = 0, hi = 0;
    const bool has_lo = number(&lo);
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(&hi)) hi = Regex::kUnbounded;
      if (!has_lo && hi == Regex::kUnbounded) return false;
    } else {
      if (!has_lo) return false;
      hi = lo;
    }
    if (j >= p_.size() || p_[j] != '}' || lo > hi) return false;
    i_ = j + 1;
    *min = lo;
    *max = hi;
    return true;
  }

  std::unique_ptr<Node> ParseAtom() {
    const char32_t c = p_[i_++];
    switch (c) {
      case '(':
        return ParseGroup();
      case '[':
        return ParseClass();
      case '.':
        return AddSet({{CharSetItem::Kind::kRange, '\n', '\n'}}, /*negated=*/true);
      case '\\': {
        CharSetItem item;
        if (!ParseEscape(&item)) return Fail("escape");
        return AddSet({item}, false);
      }
      case '^':
      case '$':
        --i_;
        return Fail("anchor");
      case '*':
      case '+':
      case '?':
        --i_;
        return Fail("quantifier without operand");
      default:
        return AddSet({{CharSetItem::Kind::kRange, c, c}}, false);
    }
  }

  std::unique_ptr<Node> ParseGroup() {
    std::unique_ptr<Node> inner;
    const bool saved_case = case_insensitive_;
    if (Consume('?')) {
      if (Consume(':')) {
        inner = ParseAlternation();
      } else if (Peek('=') || Peek('!')) {
        const bool negated = p_[i_++] == '!';
        inner = MakeNode(Node::Kind::kLookahead);
        inner->negated = negated;
        inner->children.push_back(ParseAlternation());
      } else if (Peek('i') || Peek('-')) {
        const bool on = Consume('i');
        if (!on && !(Consume('-') && Consume('i'))) return Fail("group flag");
        case_insensitive_ = on;
        if (Consume(')')) return nullptr;  // (?i): applies to the rest of the enclosing group
        if (!Consume(':')) return Fail("group flag");
        inner = ParseAlternation();
      } else if (Peek('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
        while (!AtEnd() && !Consume('>')) ++i_;  // named group: the name is irrelevant
        inner = ParseAlternation();
      } else {
        return Fail("group kind (lookbehind, atomic group or option)");
      }
    } else {
      inner = ParseAlternation();
    }
    case_insensitive_ = saved_case;
    if (!Consume(')')) return Fail("unterminated group");
    return inner;
  }

  std::unique_ptr<Node> ParseClass() {
    const bool negated = Consume('^');
    std::vector<CharSetItem> items;
    bool first = true;
    while (!AtEnd() && (first || !Peek(']'))) {
      first = false;
      if (Peek('[')) return Fail("nested character class");
      if (Peek('&') && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        return Fail("character class intersection");
      }
      CharSetItem item;
      if (!ParseClassAtom(&item)) return Fail("escape in class");
      if (item.kind == CharSetItem::Kind::kRange && Peek('-') && i_ + 1 < p_.size() &&
          p_[i_ + 1] != ']') {
        ++i_;
        CharSetItem last;
        if (!ParseClassAtom(&last) || last.kind != CharSetItem::Kind::kRange) {
          return Fail("class range bound");
        }
        if (last.first < item.first) return Fail("reversed class range");
        item.last = last.first;
      }
      items.push_back(item);
    }
    if (!Consume(']')) return Fail("unterminated character class");
    return AddSet(std::move(items), negated);
  }

  bool ParseClassAtom(CharSetItem* item) {
    const char32_t c = p_[i_++];
    if (c == '\\') return ParseEscape(item);
    *item = {CharSetItem::Kind::kRange, c, c};
    return true;
  }

  // Parses the escape after a backslash into a one-code-point range or a class item.
  bool ParseEscape(CharSetItem* item) {
    if (AtEnd()) return false;
    const char32_t c = p_[i_++];
    auto literal = [item](char32_t v) {
      *item = {CharSetItem::Kind::kRange, v, v};
      return true;
    };
    switch (c) {
      case 'n':
        return literal('\n');
      case 'r':
        return literal('\r');
      case 't':
        return literal('\t');
      case 'f':
        return literal('\f');
      case 'v':
        return literal('\v');
      case 'a':
        return literal('\a');
      case 'e':
        return literal(0x1B);
      case 's':
        return *item = {CharSetItem::Kind::kWhiteSpace}, true;
      case 'S':
        return *item = {CharSetItem::Kind::kNotWhiteSpace}, true;
      case 'w':
        return *item = {CharSetItem::Kind::kWord}, true;
      case 'W':
        return *item = {CharSetItem::Kind::kNotWord}, true;
      case 'd':
        return *item = {CharSetItem::Kind::kCategories, 0, 0, CategoryBit(Category::kNd)}, true;
      case 'D':
        return *item = {CharSetItem::Kind::kNotCategories, 0, 0, CategoryBit(Category::kNd)}, true;
      case 'p':
      case 'P':
        return ParseProperty(c == 'P', item);
      case 'x':
      case 'u':
        return ParseHex(c, item);
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          --i_;
          return false;
        }
        return literal(c);
    }
  }

  bool ParseHex(char32_t kind, CharSetItem* item) {
    const bool braced = kind == 'x' && Consume('{');
    const size_t digits = braced ? 8 : (kind == 'x' ? 2 : 4);
    char32_t value = 0;
    size_t n = 0;
    while (n < digits && !AtEnd()) {
      const char32_t h = p_[i_];
      int v = h >= '0' && h <= '9'   ? static_cast<int>(h - '0')
              : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                     : -1;
      if (v < 0) break;
      value = value * 16 + v;
      ++i_;
      ++n;
    }
    if (n == 0 || (braced && !Consume('}')) || (!braced && n != digits) || value > kMaxCodePoint) {
      return false;
    }
    *item = {CharSetItem::Kind::kRange, value, value};
    return true;
  }

  bool ParseProperty(bool negated, CharSetItem* item) {
    if (!Consume('{')) return false;
    if (Consume('^')) negated = !negated;
    std::string name;
    while (!AtEnd() && !Peek('}')) name.push_back(static_cast<char>(p_[i_++] & 0x7F));
    if (!Consume('}')) return false;
    CategoryMask mask = 0;
    for (const CategoryName& entry : kCategoryNames) {
      if (name == entry.name) mask = entry.mask;
    }
    for (int k = 0; k < static_cast<int>(Category::kCn) + 1; ++k) {
      if (name == kShortCategories[k]) mask = CategoryBit(static_cast<Category>(k));
    }
    if (mask == 0) {
      i_ -= name.size() + 1;
      return false;
    }
    *item = {negated ? CharSetItem::Kind::kNotCategories : CharSetItem::Kind::kCategories, 0, 0,
             mask};
    return true;
  }

  std::u32string p_;
  size_t i_ = 0;
  bool case_insensitive_ = false;
  std::vector<CharSet>* sets_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RegexNode>> ParseRegex(std::string_view pattern,
                                                      std::vector<CharSet>* sets) {
  return Parser(pattern, sets).Parse();
}

}  // namespace mlaserve::tokenizer_internal
