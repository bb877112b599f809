// Load() errors: each unsupported or malformed part of a tokenizer.json is refused with a
// status that names it.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;

std::filesystem::path FixtureFile(const std::string& name) {
  const char* data = std::getenv("MLASERVE_TEST_DATA");
  return std::filesystem::path(data != nullptr ? data : "tests/data") / "tokenizer" / "fixtures" /
         name / "tokenizer.json";
}

class TokenizerLoadTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tokenizer_load_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ifstream in(FixtureFile("byte_level"));
    base_ = nlohmann::json::parse(in);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Loads the byte_level fixture after `edit`; returns the status.
  absl::Status LoadEdited(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json json = base_;
    edit(json);
    return Write(json.dump());
  }
  absl::Status Write(const std::string& text) {
    std::ofstream(dir_ / "tokenizer.json") << text;
    return Tokenizer::Load((dir_ / "tokenizer.json").string()).status();
  }

  std::filesystem::path dir_;
  nlohmann::json base_;
};

TEST_F(TokenizerLoadTest, UnmodifiedFixtureLoads) {
  EXPECT_TRUE(LoadEdited([](nlohmann::json&) {}).ok());
}

TEST_F(TokenizerLoadTest, MissingFileIsNotFound) {
  EXPECT_EQ(Tokenizer::Load((dir_ / "absent.json").string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::Load(dir_.string()).status().code(), absl::StatusCode::kNotFound);
}

// A model folder whose tokenizer.json opens but cannot be read (a folder) is an error naming
// it, not an empty file.
TEST_F(TokenizerLoadTest, UnreadableFileIsFailedPreconditionNamingIt) {
  const std::filesystem::path folder = dir_ / "tokenizer.json";
  ASSERT_TRUE(std::filesystem::create_directory(folder));
  const absl::Status status = Tokenizer::Load(dir_.string()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr(folder.string() + ": read failed"));
}

TEST_F(TokenizerLoadTest, MalformedJsonNamesTheFile) {
  const absl::Status status = Write("{\"model\": ");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokenizer.json"));
}

struct EditCase {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  const char* message;
};

TEST_F(TokenizerLoadTest, RefusesUnsupportedComponentsByName) {
  const EditCase cases[] = {
      {"model type", [](auto& j) { j["model"]["type"] = "WordPiece"; }, "model type \"WordPiece\""},
      {"dropout", [](auto& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {"vocab", [](auto& j) { j["model"]["vocab"] = nlohmann::json::array(); }, "vocab"},
      {"merge token", [](auto& j) { j["model"]["merges"][0] = "zz qq"; }, "merges[0]"},
      {"merge form", [](auto& j) { j["model"]["merges"][1] = "nospace"; }, "merges[1]"},
      {"merge pair",
       [](auto& j) {
         j["model"]["merges"][0] = {1, 2};
       },
       "merges[0]"},
      {"unk", [](auto& j) { j["model"]["unk_token"] = "<nope>"; }, "unk_token"},
      {"normalizer",
       [](auto& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer type \"NFKC\""},
      {"pre-tokenizer",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
       },
       "pre_tokenizer type \"Metaspace\""},
      {"split regex",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"Regex", "(?<=a)b"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}};
       },
       "pre_tokenizer Split pattern: regex"},
      {"split behavior",
       [](auto& j) {
         j["pre_tokenizer"] = {
             {"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}};
       },
       "behavior \"Sideways\""},
      {"post-processor",
       [](auto& j) {
         j["post_processor"] = {{"type", "Whatever"}};
       },
       "post_processor type \"Whatever\""},
      {"template",
       [](auto& j) { j["post_processor"]["special_tokens"] = nlohmann::json::object(); },
       "TemplateProcessing: special_tokens has no ids"},
      {"decoder",
       [](auto& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder type \"WordPiece\""},
      {"decoder order",
       [](auto& j) {
         j["decoder"] = {{"type", "Sequence"},
                         {"decoders", {{{"type", "ByteLevel"}}, {{"type", "ByteFallback"}}}}};
       },
       "after Fuse or ByteLevel"},
      {"added token id", [](auto& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id"},
      {"added token flag", [](auto& j) { j["added_tokens"][1]["lstrip"] = "yes"; },
       "added_tokens[1].lstrip"},
      {"truncation",
       [](auto& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "truncation"},
  };
  for (const EditCase& c : cases) {
    const absl::Status status = LoadEdited(c.edit);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.name;
  }
}

// Found by tests/fuzz/tokenizer_json_fuzz: an id of 2^31 - 1 overflowed the id table's size
// (max_id + 1) and a large one made Load allocate gigabytes; ids are now bounded.
TEST_F(TokenizerLoadTest, RefusesIdsBeyondTheLimit) {
  const EditCase cases[] = {
      {"added token", [](auto& j) { j["added_tokens"][0]["id"] = 2147483647; },
       "added_tokens[0].id"},
      {"vocab", [](auto& j) { j["model"]["vocab"]["zz"] = 2000000000; }, "vocab id of \"zz\""},
      {"negative", [](auto& j) { j["model"]["vocab"]["zz"] = -1; }, "vocab id of \"zz\""},
      {"template",
       [](auto& j) { j["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"][0] = -2; },
       "special token ids"},
  };
  for (const EditCase& c : cases) {
    const absl::Status status = LoadEdited(c.edit);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.name;
  }
}

// Encode emits the post-processor's ids as they are: one without a token would lie at or above
// vocab_size(), which the tokenizer_json_fuzz checks forbid.
TEST_F(TokenizerLoadTest, RefusesTemplateIdsWithoutAToken) {
  const absl::Status status = LoadEdited(
      [](auto& j) { j["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"][0] = 100000; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("special token id 100000 is not in the vocabulary"));
}

// A Strip decoder count above INT_MAX strips everything instead of wrapping to a negative count.
TEST_F(TokenizerLoadTest, HugeStripCountsStripEverything) {
  nlohmann::json json = base_;
  // Every token of " a b" (byte-level, prefix space added) starts with "\u0120" (the space).
  json["decoder"] = {{"type", "Strip"}, {"content", "\u0120"}, {"start", 4294967295u}, {"stop", 0}};
  std::ofstream(dir_ / "tokenizer.json") << json.dump();
  auto tokenizer = Tokenizer::Load((dir_ / "tokenizer.json").string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> ids = (*tokenizer)->Encode("a b", /*add_special_tokens=*/false);
  EXPECT_EQ((*tokenizer)->Decode(ids, /*skip_special_tokens=*/false), "ab");
}

}  // namespace
}  // namespace mlaserve
