#include "engine/tokenizer/unicode.h"

#include <string>

#include "gtest/gtest.h"

namespace mlaserve::tokenizer_internal {
namespace {

TEST(TokenizerUnicodeTest, GeneralCategories) {
  EXPECT_EQ(GetCategory('A'), Category::kLu);
  EXPECT_EQ(GetCategory('a'), Category::kLl);
  EXPECT_EQ(GetCategory(0x01C5), Category::kLt);
  EXPECT_EQ(GetCategory(0x02B0), Category::kLm);
  EXPECT_EQ(GetCategory(0x4E2D), Category::kLo);  // inside a First/Last range of the data
  EXPECT_EQ(GetCategory(0x0301), Category::kMn);
  EXPECT_EQ(GetCategory('7'), Category::kNd);
  EXPECT_EQ(GetCategory(0x0663), Category::kNd);
  EXPECT_EQ(GetCategory(0x216B), Category::kNl);
  EXPECT_EQ(GetCategory(0x00BD), Category::kNo);
  EXPECT_EQ(GetCategory('!'), Category::kPo);
  EXPECT_EQ(GetCategory('$'), Category::kSc);
  EXPECT_EQ(GetCategory(0x1F600), Category::kSo);
  EXPECT_EQ(GetCategory(0x1D400), Category::kLu);
  EXPECT_EQ(GetCategory(0x3000), Category::kZs);
  EXPECT_EQ(GetCategory(0xD800), Category::kCs);
  EXPECT_EQ(GetCategory(0xE000), Category::kCo);
  EXPECT_EQ(GetCategory(0x10FFFF), Category::kCn);
  EXPECT_TRUE(InCategories(0x00E9, kLetterMask));
  EXPECT_FALSE(InCategories(0x00E9, kNumberMask));
}

TEST(TokenizerUnicodeTest, WhiteSpaceAndWordCharacters) {
  for (char32_t c : {U' ', U'\t', U'\r', U'\u0085', U'\u00a0', U'\u2028', U'\u3000'}) {
    EXPECT_TRUE(IsWhiteSpace(c)) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'\u200b', U'\ufeff', U'a', U'\u180e'})
    EXPECT_FALSE(IsWhiteSpace(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', U'_', U'9', U'\u0301', U'\u200d', U'\u24b6'}) {
    EXPECT_TRUE(IsRustWordCharacter(c)) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U' ', U'-', U'\U0001F600'})
    EXPECT_FALSE(IsRustWordCharacter(c)) << static_cast<uint32_t>(c);
}

TEST(TokenizerUnicodeTest, SimpleCaseFolding) {
  EXPECT_EQ(SimpleCaseFold('A'), U'a');
  EXPECT_EQ(SimpleCaseFold('a'), U'a');
  EXPECT_EQ(SimpleCaseFold(0x017F), U's');     // long s
  EXPECT_EQ(SimpleCaseFold(0x212A), U'k');     // Kelvin sign
  EXPECT_EQ(SimpleCaseFold(0x1E9E), 0x00DFu);  // capital sharp s folds simply to ß
  EXPECT_EQ(SimpleCaseFold(0x10400), 0x10428u);
  const std::vector<char32_t> s = CaseVariants('s');
  EXPECT_EQ(s.size(), 3u);  // s, S, ſ
}

TEST(TokenizerUnicodeTest, Nfc) {
  EXPECT_EQ(ToNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(ToNfc("e\u0301"), "\u00e9");
  EXPECT_EQ(ToNfc("o\u0323\u0302"), "\u1ed9");
  EXPECT_EQ(ToNfc("o\u0302\u0323"), "\u1ed9");       // reordered by combining class first
  EXPECT_EQ(ToNfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul jamo compose arithmetically
  EXPECT_EQ(ToNfc("\uac00\u11a8"), "\uac01");
  EXPECT_EQ(ToNfc("\u212b"), "\u00c5");        // singleton decomposition
  EXPECT_EQ(ToNfc("\u0958"), "\u0915\u093c");  // composition exclusion
  EXPECT_EQ(ToNfc("a\u0328\u0301"), "\u0105\u0301");
  EXPECT_EQ(ToNfc("a\u0315\u0300\u05ae\u0300b"), "\u00e0\u05ae\u0300\u0315b");  // blocking
  EXPECT_EQ(ToNfc("\u0b47\u0b3e"), "\u0b4b");  // two starters compose
  EXPECT_EQ(ToNfc("\u1e9b\u0323"), "\u1e9b\u0323");
  EXPECT_EQ(ToNfc("\u0301a"), "\u0301a");  // leading combining mark stays
}

TEST(TokenizerUnicodeTest, Utf8) {
  std::string out;
  AppendUtf8(0x1F600, &out);
  EXPECT_EQ(out, "\U0001F600");
  EXPECT_TRUE(IsValidUtf8("h\u00e9\u4e2d\U0001F600"));
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xE4\xB8"));

  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("a\xE4\xB8", /*final=*/false, &out), 1u);  // incomplete tail held
  EXPECT_EQ(out, "a");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("a\xE4\xB8", /*final=*/true, &out), 3u);
  EXPECT_EQ(out, "a\uFFFD");
  // Each maximal invalid subpart is one U+FFFD.
  for (const auto& [bytes, text] : std::vector<std::pair<std::string, std::string>>{
           {"\xE4\xB8"
            "A",
            "\uFFFDA"},
           {"\xF0\x80", "\uFFFD\uFFFD"},
           {"\xC0\x80", "\uFFFD\uFFFD"},
           {"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
           {"\xFF\xE4\xB8\xAD", "\uFFFD\u4e2d"}}) {
    out.clear();
    AppendUtf8Lossy(bytes, /*final=*/false, &out);
    EXPECT_EQ(out, text);
  }

  std::vector<char32_t> code_points;
  std::vector<uint32_t> offsets;
  DecodeUtf8("a\u00e9\U0001F600", &code_points, &offsets);
  EXPECT_EQ(code_points, (std::vector<char32_t>{'a', 0xE9, 0x1F600}));
  EXPECT_EQ(offsets, (std::vector<uint32_t>{0, 1, 3, 7}));
}

}  // namespace
}  // namespace mlaserve::tokenizer_internal
