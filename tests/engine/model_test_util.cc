#include "tests/engine/model_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace mlaserve::testing {

std::string ModelDir(const std::string& variant) {
  const char* root = std::getenv("MLASERVE_TEST_DATA");
  return std::string(root == nullptr ? "tests/data" : root) + "/models/" + variant;
}

std::vector<std::string> ModelVariants() {
  std::vector<std::string> out;
  const std::filesystem::path root = std::filesystem::path(ModelDir(""));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (std::filesystem::exists(entry.path() / "golden.json")) {
      out.push_back(entry.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<Golden> ReadGolden(const std::string& model_dir) {
  std::ifstream in(model_dir + "/golden.json");
  if (!in) return absl::NotFoundError(model_dir + "/golden.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("golden.json is not JSON");
  Golden g;
  g.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  for (const auto& step : j.at("steps")) {
    GoldenStep s;
    s.id = step.at("id").get<int32_t>();
    for (const auto& pair : step.at("top")) {
      s.top.emplace_back(pair.at(0).get<int32_t>(), pair.at(1).get<float>());
    }
    g.steps.push_back(std::move(s));
  }
  std::ifstream dev(model_dir + "/bf16_deviation.json");
  if (!dev) return absl::NotFoundError(model_dir + "/bf16_deviation.json");
  std::stringstream dev_text;
  dev_text << dev.rdbuf();
  const nlohmann::json d = nlohmann::json::parse(dev_text.str(), nullptr, false);
  if (d.is_discarded()) return absl::InvalidArgumentError("bf16_deviation.json is not JSON");
  g.bf16_deviation = d.at("max_top5_logprob_deviation").get<double>();
  g.bf16_cache_deviation = d.at("max_top5_logprob_deviation_bf16_cache").get<double>();
  return g;
}

std::vector<double> LogSoftmax(absl::Span<const float> logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(v - max);
  const double lse = max + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

std::vector<int32_t> ReversedBlocks(int32_t first_block, int32_t num_tokens, int32_t block_size) {
  const int32_t n = (num_tokens + block_size - 1) / block_size;
  std::vector<int32_t> table(n);
  for (int32_t i = 0; i < n; ++i) table[i] = first_block + n - 1 - i;
  return table;
}

}  // namespace mlaserve::testing
