#include "engine/tokenizer/regex.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve::tokenizer_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// All successive non-overlapping matches, as the Split pre-tokenizer finds them.
std::vector<std::string> Matches(const std::string& pattern, const std::string& text) {
  auto regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << pattern << ": " << regex.status();
  if (!regex.ok()) return {};
  std::vector<char32_t> code_points;
  std::vector<uint32_t> offsets;
  DecodeUtf8(text, &code_points, &offsets);
  std::vector<std::string> out;
  size_t from = 0, begin, end;
  while ((*regex)->Find(code_points.data(), code_points.size(), from, &begin, &end)) {
    out.push_back(text.substr(offsets[begin], offsets[end] - offsets[begin]));
    from = end;
  }
  return out;
}

TEST(TokenizerRegexTest, AlternativesInPriorityOrder) {
  EXPECT_THAT(Matches("a|ab", "ab"), ElementsAre("a"));
  EXPECT_THAT(Matches("ab|a", "ab"), ElementsAre("ab"));
  EXPECT_THAT(Matches("(?:ab)?c", "abc c"), ElementsAre("abc", "c"));
  EXPECT_THAT(Matches("(?:ab){2}", "ababab"), ElementsAre("abab"));
  EXPECT_THAT(Matches("(a|b)+c", "abbac"), ElementsAre("abbac"));
}

TEST(TokenizerRegexTest, Quantifiers) {
  EXPECT_THAT(Matches("\\p{N}{1,3}", "12345"), ElementsAre("123", "45"));
  EXPECT_THAT(Matches("a+?", "aaa"), ElementsAre("a", "a", "a"));
  EXPECT_THAT(Matches("a{2,3}?", "aaa"), ElementsAre("aa"));
  EXPECT_THAT(Matches("a{2,}", "a aa aaaa"), ElementsAre("aa", "aaaa"));
  EXPECT_THAT(Matches("a*+a", "aaa"), IsEmpty());  // possessive: never gives back
  EXPECT_THAT(Matches("a++b", "aab"), ElementsAre("aab"));
  EXPECT_THAT(Matches("x{,2}y", "xxxy"), ElementsAre("xxy"));
  EXPECT_THAT(Matches("a{x", "a{x"), ElementsAre("a{x"));  // not an interval: literal
}

TEST(TokenizerRegexTest, ClassesAndEscapes) {
  EXPECT_THAT(Matches("[a-c\\-x]+", "abc-xyz"), ElementsAre("abc-x"));
  EXPECT_THAT(Matches("[]a]+", "]a]b"), ElementsAre("]a]"));
  EXPECT_THAT(Matches("[^abc\\s]+", "abxyz cd"), ElementsAre("xyz", "d"));
  EXPECT_THAT(Matches("\\x41\\u0042\\x{43}", "ABC"), ElementsAre("ABC"));
  EXPECT_THAT(Matches("a.c", "abc a\nc"), ElementsAre("abc"));
  EXPECT_THAT(Matches("\\d+", "x\u06634"), ElementsAre("\u06634"));
  EXPECT_THAT(Matches("\\w+", "na\u00efve_1 x"), ElementsAre("na\u00efve_1", "x"));
  EXPECT_THAT(Matches("[\\r\\n]+", "a\r\nb"), ElementsAre("\r\n"));
  EXPECT_THAT(Matches("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+", "x.y@Zz"),
              ElementsAre(".y", "@Zz"));
}

TEST(TokenizerRegexTest, UnicodeProperties) {
  EXPECT_THAT(Matches("\\p{L}+", "h\u00e9llo w\u00f6rld 123"),
              ElementsAre("h\u00e9llo", "w\u00f6rld"));
  EXPECT_THAT(Matches("\\p{L}+", "\U0001D400\U0001D401"), ElementsAre("\U0001D400\U0001D401"));
  EXPECT_THAT(Matches("\\p{So}", "a\U0001F600b"), ElementsAre("\U0001F600"));
  EXPECT_THAT(Matches("\\P{L}+", "ab12cd"), ElementsAre("12"));
  EXPECT_THAT(Matches("\\p{^N}+", "ab12cd"), ElementsAre("ab", "cd"));
  EXPECT_THAT(Matches("[\\p{Lu}\\p{Lt}]+", "abCDe\u01c5"), ElementsAre("CD", "\u01c5"));
  EXPECT_THAT(Matches("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", "x,yz"), ElementsAre("x", ",yz"));
  EXPECT_THAT(Matches("[\u4e00-\u9fa5]+", "ab\u4e2d\u6587cd"), ElementsAre("\u4e2d\u6587"));
}

TEST(TokenizerRegexTest, CaseInsensitiveScopes) {
  EXPECT_THAT(Matches("(?i:'s|'t)", "'S 't 'x '\u017f"), ElementsAre("'S", "'t", "'\u017f"));
  EXPECT_THAT(Matches("(?i)[a-c]+", "ABCabcd"), ElementsAre("ABCabc"));
  EXPECT_THAT(Matches("a(?i:b)c", "aBc ABC abC"), ElementsAre("aBc"));
  EXPECT_THAT(Matches("(?i:[^a])+", "xAay"), ElementsAre("x", "y"));
}

TEST(TokenizerRegexTest, Lookahead) {
  EXPECT_THAT(Matches("\\s+(?!\\S)|\\s+", "a   b  "), ElementsAre("  ", " ", "  "));
  EXPECT_THAT(Matches("a(?=b)", "ab ac"), ElementsAre("a"));
  EXPECT_THAT(Matches("\\s*[\\r\\n]+", "x \n\n y"), ElementsAre(" \n\n"));
}

TEST(TokenizerRegexTest, RefusesUnsupportedConstructs) {
  for (const char* pattern :
       {"(?<=a)b", "(?<!a)b", "^a", "a$", "\\bfoo", "[[a]]", "[a&&b]", "a**", "(a", "a)",
        "\\p{Han}", "(?>a)", "(?:a*)*", "(?:ab){1001}", "(?:ab)++", "\\1", "[z-a]"}) {
    auto regex = Regex::Compile(pattern);
    ASSERT_FALSE(regex.ok()) << pattern;
    EXPECT_THAT(regex.status().message(), HasSubstr("regex")) << pattern;
  }
}

}  // namespace
}  // namespace mlaserve::tokenizer_internal
