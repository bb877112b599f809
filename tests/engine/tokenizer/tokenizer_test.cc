// Tokenizer behaviour on small hand-made tokenizer.json files (tests/data/tokenizer/fixtures),
// one per family of components. Expected values come from the Hugging Face tokenizers library
// run on the same files (tools/tokenizer/reference.js does the same for the large files).

#include "engine/tokenizer/tokenizer.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::filesystem::path Fixture(const std::string& name) {
  const char* data = std::getenv("MLASERVE_TEST_DATA");
  return std::filesystem::path(data != nullptr ? data : "tests/data") / "tokenizer" / "fixtures" /
         name;
}

std::unique_ptr<Tokenizer> LoadFixture(const std::string& name) {
  auto tokenizer = Tokenizer::Load(Fixture(name).string());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;  // without special tokens
  std::string decoded;       // Decode(ids, skip_special_tokens=false)
};

void ExpectCases(const Tokenizer& tokenizer, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_THAT(tokenizer.Encode(c.text, false), ElementsAreArray(c.ids)) << c.text;
    EXPECT_EQ(tokenizer.Decode(c.ids, false), c.decoded) << c.text;
  }
}

// GPT-2 style: ByteLevel pre-tokenizer with its regex and add_prefix_space, merges as
// "a b" strings, added tokens with lstrip/rstrip, single_word and normalized flags.
TEST(TokenizerTest, ByteLevelWithAddedTokens) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  ExpectCases(*tokenizer,
              {
                  {"the hello world", {258, 32, 257, 259, 111, 268}, " the hello world"},
                  // rstrip takes the spaces after <mask>; the next piece gets its own prefix space.
                  {"Hello<mask>  world", {32, 72, 260, 111, 278, 268}, " Hello<mask> world"},
                  {"x  <mask>  y", {32, 120, 278, 32, 121}, " x<mask> y"},
                  // single_word: only matched between non-word characters.
                  {"a [word] b", {32, 97, 32, 280, 32, 98}, " a [word] b"},
                  {"a[word]b", {32, 97, 91, 119, 265, 100, 93, 98}, " a[word]b"},
                  {"<|endoftext|>the", {277, 258}, "<|endoftext|> the"},
                  {"he said 123 \u4e2d",
                   {32, 257, 32, 115, 97, 105, 100, 32, 273, 276},
                   " he said 123 \u4e2d"},
                  {"  the   world  ", {32, 258, 269, 268, 269}, "  the   world  "},
                  {"<pad>", {279}, "<pad>"},
                  {"", {}, ""},
              });
}

TEST(TokenizerTest, TemplateProcessingAddsSpecialTokens) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("the", true), ElementsAre(277, 258, 277));
  EXPECT_THAT(tokenizer->Encode("", true), ElementsAre(277, 277));
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);  // no tokenizer_config.json
}

TEST(TokenizerTest, DecodeSkipsSpecialTokensAndReplacesInvalidUtf8) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Decode({277, 258, 277}, false), "<|endoftext|> the<|endoftext|>");
  EXPECT_EQ(tokenizer->Decode({277, 258, 277}, true), " the");
  EXPECT_EQ(tokenizer->Decode({258, 278, 258}, true), " the the");  // <mask> is special
  // Byte-level ids are byte values here: maximal invalid subparts become one U+FFFD each.
  EXPECT_EQ(tokenizer->Decode({228, 184}, false), "\uFFFD");
  EXPECT_EQ(tokenizer->Decode({228, 184, 65}, false), "\uFFFDA");
  EXPECT_EQ(tokenizer->Decode({240, 128}, false), "\uFFFD\uFFFD");
  EXPECT_EQ(tokenizer->Decode({237, 160, 128}, false), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(tokenizer->Decode({255, 254, 228, 184, 173}, false), "\uFFFD\uFFFD\u4e2d");
  EXPECT_EQ(tokenizer->Decode({99999, -1}, false), "");
}

TEST(TokenizerTest, VocabularyAccessors) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 281);
  EXPECT_EQ(tokenizer->token_to_id("\u0120the"), 258);
  EXPECT_EQ(tokenizer->token_to_id("<mask>"), 278);
  EXPECT_EQ(tokenizer->token_to_id("missing"), std::nullopt);
  EXPECT_EQ(tokenizer->id_to_token(258), "\u0120the");
  EXPECT_EQ(tokenizer->id_to_token(5000), "");
  EXPECT_TRUE(tokenizer->is_special(277));
  EXPECT_FALSE(tokenizer->is_special(279));
}

// NFC normalizer, a Split regex with (?i:) and lookahead, Digits, ByteLevel without its regex,
// merges as arrays, ignore_merges, a Sequence post-processor, and tokenizer_config.json asking
// for bos (added, the template lacks it) and eos (not added twice: the template has it).
TEST(TokenizerTest, NormalizedSplitPipeline) {
  auto tokenizer = LoadFixture("pipeline");
  ASSERT_NE(tokenizer, nullptr);
  ExpectCases(
      *tokenizer,
      {
          {"abc abcd xy 1111", {257, 32, 257, 100, 262, 32, 49, 49, 49, 49}, "abc abcd xy 1111"},
          {"It'S caf\u00e9 cafe\u0301 o\u0323\u0302",
           {73, 116, 39, 83, 32, 99, 97, 102, 258, 32, 99, 97, 102, 258, 32, 225, 187, 153},
           "It'S caf\u00e9 caf\u00e9 \u1ed9"},
          {"a\n\n b  \t c", {97, 10, 10, 32, 98, 32, 32, 9, 32, 99}, "a\n\n b  \t c"},
          {"<s>abc</s>", {265, 257, 266}, "<s>abc</s>"},
          {"12345", {49, 50, 51, 52, 53}, "12345"},
          {"   ", {32, 32, 32}, "   "},
      });
  EXPECT_EQ(tokenizer->bos_id(), 265);
  EXPECT_EQ(tokenizer->eos_id(), 266);
  EXPECT_THAT(tokenizer->Encode("abc", true), ElementsAre(265, 257, 266));
}

// SentencePiece-converted BPE: Prepend + Replace normalizers, byte fallback with a missing
// byte token (so unk_token with fuse_unk), and the Replace/ByteFallback/Fuse/Strip decoder.
TEST(TokenizerTest, ByteFallbackPipeline) {
  auto tokenizer = LoadFixture("byte_fallback");
  ASSERT_NE(tokenizer, nullptr);
  ExpectCases(*tokenizer, {
                              {"hello world", {271, 276}, "hello world"},
                              {"hello  wor", {271, 258, 274}, "hello  wor"},
                              // 'b' falls back to bytes; the emoji need the missing <0xF0> and fuse
                              // into one <unk>, which the reference emits after the byte tokens.
                              {"a\U0001F600\U0001F600b", {258, 266, 101, 0}, "ab<unk>"},
                              {"h\u00e9", {267, 198, 172}, "h\u00e9"},
                              {"<s>hello</s>", {1, 271, 2}, "<s> hello</s>"},
                              {" hello", {258, 271}, " hello"},
                              {"", {}, ""},
                          });
  EXPECT_THAT(tokenizer->Encode("hello", true), ElementsAre(1, 271));
  EXPECT_EQ(tokenizer->Decode({1, 262, 263, 264}, false), "<s>owr");
  EXPECT_EQ(tokenizer->Decode({1, 262, 263, 264}, true), "owr");
  EXPECT_EQ(tokenizer->Decode({0, 262, 0}, true), "o");
  // An invalid byte group: every byte becomes U+FFFD (unlike ByteLevel's maximal subparts).
  EXPECT_EQ(tokenizer->Decode({262, 233, 201, 168, 3}, false), "o\uFFFD\uFFFD\uFFFD\uFFFD");
  // Strip removes one leading space of the fused text, wherever it came from.
  EXPECT_EQ(tokenizer->Decode({258}, false), "");
  EXPECT_EQ(tokenizer->Decode({258, 258}, false), " ");
  EXPECT_EQ(tokenizer->Decode({258, 231, 187, 176, 258, 267}, false), "\u4e2d  h");
  EXPECT_EQ(tokenizer->Decode({35, 271}, false), " hello");  // <0x20> then "▁hello"
  EXPECT_EQ(tokenizer->Decode({1, 258, 271}, false), "<s>  hello");
  EXPECT_EQ(tokenizer->Decode({1, 258, 271}, true), " hello");
  EXPECT_EQ(tokenizer->Decode({258, 231, 187}, false), "\uFFFD\uFFFD");
}

// Random id sequences decoded by the reference library (reference.js --decodes), also fed
// through a DecodeStream one id at a time.
TEST(TokenizerTest, ByteFallbackDecoderMatchesReferenceOnRandomIds) {
  auto tokenizer = LoadFixture("byte_fallback");
  ASSERT_NE(tokenizer, nullptr);
  std::ifstream in(Fixture("byte_fallback") / "decodes.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_EQ(cases.size(), 300u);
  for (const auto& c : cases) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer->Decode(ids, false), c["text"].get<std::string>()) << c["ids"];
    EXPECT_EQ(tokenizer->Decode(ids, true), c["text_skip"].get<std::string>()) << c["ids"];
    Tokenizer::DecodeStream stream = tokenizer->NewDecodeStream(false);
    std::string streamed;
    for (const int32_t id : ids) {
      std::string delta;
      stream.Add(id, &delta);
      EXPECT_TRUE(tokenizer_internal::IsValidUtf8(delta)) << c["ids"];
      streamed += delta;
    }
    stream.Finish(&streamed);
    EXPECT_EQ(streamed, c["text"].get<std::string>()) << c["ids"];
  }
}

// The byte_level fixture with `pre_tokenizer` replaced and merges across '-' added, so that
// piece boundaries show in the ids.
std::unique_ptr<Tokenizer> LoadWithPreTokenizer(const nlohmann::json& pre_tokenizer) {
  std::ifstream in(Fixture("byte_level") / "tokenizer.json");
  nlohmann::json json = nlohmann::json::parse(in);
  int32_t id = 281;
  for (const char* token : {"--", "-f", "l-", "n-", "-c"}) json["model"]["vocab"][token] = id++;
  for (const char* merge : {"- -", "- f", "l -", "n -", "- c"})
    json["model"]["merges"].push_back(merge);
  json["pre_tokenizer"] = pre_tokenizer;
  const auto path = std::filesystem::temp_directory_path() /
                    ("tokenizer_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << json.dump();
  auto tokenizer = Tokenizer::Load(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST(TokenizerTest, SplitBehaviors) {
  struct BehaviorCase {
    const char* behavior;
    bool invert;
    std::vector<int32_t> ids;
  };
  // "the-final--countdown-" split on the literal "-".
  const BehaviorCase cases[] = {
      {"Isolated", false, {116, 257, 45,  102, 105, 110, 97,  108, 45,  45,
                           99,  111, 117, 110, 116, 100, 111, 119, 110, 45}},
      {"Removed",
       false,
       {116, 257, 102, 105, 110, 97, 108, 99, 111, 117, 110, 116, 100, 111, 119, 110}},
      {"Removed", true, {45, 45, 45, 45}},
      {"MergedWithPrevious",
       false,
       {116, 257, 45, 102, 105, 110, 97, 283, 45, 99, 111, 117, 110, 116, 100, 111, 119, 284}},
      {"MergedWithPrevious",
       true,
       {116, 257, 282, 105, 110, 97, 108, 45, 285, 111, 117, 110, 116, 100, 111, 119, 110, 45}},
      {"MergedWithNext",
       false,
       {116, 257, 282, 105, 110, 97, 108, 45, 285, 111, 117, 110, 116, 100, 111, 119, 110, 45}},
      {"MergedWithNext",
       true,
       {116, 257, 45, 102, 105, 110, 97, 283, 45, 99, 111, 117, 110, 116, 100, 111, 119, 284}},
      {"Contiguous",
       false,
       {116, 257, 45, 102, 105, 110, 97, 108, 281, 99, 111, 117, 110, 116, 100, 111, 119, 110, 45}},
  };
  for (const BehaviorCase& c : cases) {
    auto tokenizer = LoadWithPreTokenizer(
        {{"type", "Sequence"},
         {"pretokenizers",
          {{{"type", "Split"},
            {"pattern", {{"String", "-"}}},
            {"behavior", c.behavior},
            {"invert", c.invert}},
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}});
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_THAT(tokenizer->Encode("the-final--countdown-", false), ElementsAreArray(c.ids))
        << c.behavior << (c.invert ? " inverted" : "");
  }
}

// Digits, then ByteLevel adding a prefix space to every piece.
TEST(TokenizerTest, DigitsContiguousAndIndividual) {
  for (const bool individual : {false, true}) {
    auto tokenizer = LoadWithPreTokenizer(
        {{"type", "Sequence"},
         {"pretokenizers",
          {{{"type", "Digits"}, {"individual_digits", individual}},
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}});
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_THAT(tokenizer->Encode("a12b345 x", false),
                ElementsAreArray(individual ? std::vector<int32_t>{32, 97, 32, 49, 32, 50, 32, 98,
                                                                   32, 51, 32, 52, 32, 53, 32, 120}
                                            : std::vector<int32_t>{32, 97, 32, 272, 32, 98, 32, 51,
                                                                   52, 53, 32, 120}));
  }
}

// Encode and Decode are const and may run on many threads at once (the word cache is shared).
TEST(TokenizerTest, ConcurrentUseGivesTheSameResults) {
  auto tokenizer = LoadFixture("pipeline");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = {"abc abcd xy 1111", "It'S caf\u00e9", "a\n\n b  \t c",
                                          "<s>abc</s>", "12345 xyxy abcabc"};
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) expected.push_back(tokenizer->Encode(text, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 500; ++round) {
        const size_t i = round % texts.size();
        const std::vector<int32_t> ids = tokenizer->Encode(texts[i], true);
        if (ids != expected[i] ||
            tokenizer->Decode(ids, true) != tokenizer->Decode(expected[i], true)) {
          ++mismatches;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenizerTest, InvalidUtf8InputIsReplacedBeforeEncoding) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("the\xE4\xB8", false), tokenizer->Encode("the\uFFFD", false));
}

}  // namespace
}  // namespace mlaserve
