#include "engine/tokenizer/incremental_detokenizer.h"

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/unicode.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

std::unique_ptr<Tokenizer> LoadFixture(const std::string& name) {
  const char* data = std::getenv("MLASERVE_TEST_DATA");
  auto tokenizer = Tokenizer::Load((std::filesystem::path(data != nullptr ? data : "tests/data") /
                                    "tokenizer" / "fixtures" / name)
                                       .string());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

struct Output {
  std::vector<std::string> deltas;  // one per Add(), then Finish()'s
  std::string text;
  std::optional<std::string> stop;
};

Output Detokenize(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  DetokenizerOptions options = {}) {
  IncrementalDetokenizer detokenizer(tokenizer, std::move(options));
  Output run;
  for (const int32_t id : ids) {
    std::string delta;
    if (auto stop = detokenizer.Add(id, &delta)) run.stop = stop;
    run.deltas.push_back(delta);
    run.text += delta;
  }
  std::string delta;
  if (auto stop = detokenizer.Finish(&delta)) run.stop = stop;
  run.deltas.push_back(delta);
  run.text += delta;
  EXPECT_EQ(run.stop, detokenizer.matched_stop());
  return run;
}

// In the byte_level fixture ids 0..255 are single bytes, so any byte split can be produced.
std::vector<int32_t> ByteIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (const char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(IncrementalDetokenizerTest, MultiByteCharactersAreNeverSplit) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "h\u00e9 \u4e2d\u6587 \U0001F600!";
  const Output run = Detokenize(*tokenizer, ByteIds(text));
  EXPECT_EQ(run.text, text);
  EXPECT_EQ(run.deltas[1], "");  // the first byte of é
  EXPECT_EQ(run.deltas[2], "\u00e9");
  EXPECT_EQ(run.deltas[6], "\u4e2d");
  EXPECT_EQ(run.deltas[13], "");  // three of the emoji's four bytes
  EXPECT_EQ(run.deltas[14], "\U0001F600");
  for (const std::string& delta : run.deltas) {
    EXPECT_TRUE(tokenizer_internal::IsValidUtf8(delta)) << delta;
  }
}

TEST(IncrementalDetokenizerTest, TrailingIncompleteCharacterBecomesReplacement) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  const Output run = Detokenize(*tokenizer, {'a', 0xE4, 0xB8});
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"a", "", "", "\uFFFD"}));
}

TEST(IncrementalDetokenizerTest, ByteFallbackTokens) {
  auto tokenizer = LoadFixture("byte_fallback");
  ASSERT_NE(tokenizer, nullptr);
  // "▁", <0xE4> <0xB8> <0xAD> (中), "▁", "▁h": the leading space is stripped, the byte group
  // is released whole once the next token shows it has ended.
  const Output run = Detokenize(*tokenizer, {258, 231, 187, 176, 258, 267});
  EXPECT_EQ(run.deltas, (std::vector<std::string>{"", "", "", "", "\u4e2d ", " h", ""}));
  EXPECT_EQ(run.text, tokenizer->Decode({258, 231, 187, 176, 258, 267}, true));
}

TEST(IncrementalDetokenizerTest, SkipsSpecialTokensByDefault) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(Detokenize(*tokenizer, {277, 258, 277}).text, " the");
  DetokenizerOptions keep_special;
  keep_special.skip_special_tokens = false;
  EXPECT_EQ(Detokenize(*tokenizer, {277, 258}, keep_special).text, "<|endoftext|> the");
}

// " the", " ", "he", "ll", "o", " world"
const std::vector<int32_t> kTheHelloWorld = {258, 32, 257, 259, 111, 268};

TEST(IncrementalDetokenizerTest, StopStringAcrossTokenBoundaries) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  Output run = Detokenize(*tokenizer, kTheHelloWorld, {.stop = {"o w"}});
  EXPECT_EQ(run.text, " the hell");
  EXPECT_EQ(run.stop, "o w");
  // "o" could start the stop string: held back, then the stop matches across tokens.
  EXPECT_EQ(run.deltas, (std::vector<std::string>{" the", " ", "he", "ll", "", "", ""}));

  run =
      Detokenize(*tokenizer, kTheHelloWorld, {.stop = {"o w"}, .include_stop_str_in_output = true});
  EXPECT_EQ(run.text, " the hello w");
  EXPECT_EQ(run.deltas.back(), "");  // nothing after the stop, not even at Finish()
}

TEST(IncrementalDetokenizerTest, HoldsBackPossibleStopPrefixes) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  const Output run = Detokenize(*tokenizer, kTheHelloWorld, {.stop = {"hellx", "d!"}});
  // "he" (ending " the") and "d" could start a stop string until the next text arrives.
  EXPECT_EQ(run.deltas, (std::vector<std::string>{" t", "he ", "", "", "hello", " worl", "d"}));
  EXPECT_EQ(run.text, " the hello world");
  EXPECT_EQ(run.stop, std::nullopt);
}

TEST(IncrementalDetokenizerTest, FirstCompletedStopStringWins) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  // "ell" is complete after "ll", before "hello" could be.
  Output run = Detokenize(*tokenizer, kTheHelloWorld, {.stop = {"hello", "ell"}});
  EXPECT_EQ(run.stop, "ell");
  EXPECT_EQ(run.text, " the h");
  // Both end with "o": the longer one, which starts earlier, wins.
  run = Detokenize(*tokenizer, kTheHelloWorld, {.stop = {"lo", "hello"}});
  EXPECT_EQ(run.stop, "hello");
  EXPECT_EQ(run.text, " the ");
  // The same text as single bytes gives the same answers.
  run = Detokenize(*tokenizer, ByteIds(" the hello world"), {.stop = {"lo", "hello"}});
  EXPECT_EQ(run.stop, "hello");
  EXPECT_EQ(run.text, " the ");
}

TEST(IncrementalDetokenizerTest, StopStringCompletedByFinish) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  const Output run = Detokenize(*tokenizer, {'a', 0xE4}, {.stop = {"\uFFFD"}});
  EXPECT_EQ(run.stop, "\uFFFD");
  EXPECT_EQ(run.text, "a");
}

TEST(IncrementalDetokenizerTest, AddAfterStopReleasesNothing) {
  auto tokenizer = LoadFixture("byte_level");
  ASSERT_NE(tokenizer, nullptr);
  IncrementalDetokenizer detokenizer(*tokenizer, {.stop = {"the"}});
  std::string out;
  EXPECT_EQ(detokenizer.Add(258, &out), "the");
  EXPECT_TRUE(detokenizer.stopped());
  EXPECT_EQ(detokenizer.Add(268, &out), std::nullopt);
  EXPECT_EQ(detokenizer.Finish(&out), std::nullopt);
  EXPECT_EQ(out, " ");
}

// Without stop strings, deltas are valid UTF-8 and add up to Decode(), for random ids that
// include partial characters and special tokens.
TEST(IncrementalDetokenizerTest, ConcatenationEqualsDecodeOnRandomIds) {
  for (const std::string fixture : {"byte_level", "byte_fallback"}) {
    auto tokenizer = LoadFixture(fixture);
    ASSERT_NE(tokenizer, nullptr);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(tokenizer->vocab_size()) - 1);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int32_t> ids(1 + trial % 24);
      for (int32_t& v : ids) v = id(rng);
      const Output run = Detokenize(*tokenizer, ids, {.stop = {"zq"}});
      if (run.stop) continue;
      EXPECT_EQ(run.text, tokenizer->Decode(ids, true)) << fixture << " trial " << trial;
      for (const std::string& delta : run.deltas) {
        EXPECT_TRUE(tokenizer_internal::IsValidUtf8(delta)) << fixture << " trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve
