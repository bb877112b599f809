#include "server/cli/tokenize_command.h"

#include <filesystem>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace mlaserve {
namespace {

std::unique_ptr<Tokenizer> LoadFixture() {
  const char* data = std::getenv("MLASERVE_TEST_DATA");
  auto tokenizer = Tokenizer::Load((std::filesystem::path(data != nullptr ? data : "tests/data") /
                                    "tokenizer" / "fixtures" / "byte_level")
                                       .string());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result Tokenize(const Tokenizer& tokenizer, bool decode, bool add_special, const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = TokenizeLines(tokenizer, decode, add_special, in, out, err);
  return {code, out.str(), err.str()};
}

TEST(TokenizeCommandTest, EncodesOneLinePerLine) {
  auto tokenizer = LoadFixture();
  ASSERT_NE(tokenizer, nullptr);
  const Result r = Tokenize(*tokenizer, false, false, "the hello world\n\n<|endoftext|>the");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "258 32 257 259 111 268\n\n277 258\n");
  EXPECT_EQ(Tokenize(*tokenizer, false, true, "the\n").out, "277 258 277\n");
}

TEST(TokenizeCommandTest, DecodeRoundTrips) {
  auto tokenizer = LoadFixture();
  ASSERT_NE(tokenizer, nullptr);
  const Result r = Tokenize(*tokenizer, true, false, "258 32 257 259 111 268\n\n 277\t258 \n");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, " the hello world\n\n<|endoftext|> the\n");
}

TEST(TokenizeCommandTest, DecodeRejectsBadIdsNamingTheLine) {
  auto tokenizer = LoadFixture();
  ASSERT_NE(tokenizer, nullptr);
  for (const char* bad : {"12 x7", "99999", "-1"}) {
    const Result r = Tokenize(*tokenizer, true, false, std::string("258\n") + bad + "\n");
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_EQ(r.out, " the\n") << bad;
    EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace mlaserve
