// Helpers for tests that run a real model end to end: reading golden files written by
// tools/reference/make_goldens.py and driving a ModelRunner one sequence at a time.
#ifndef MLASERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_
#define MLASERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_runner.h"

namespace mlaserve::testing {

struct GoldenStep {
  int32_t id = 0;                               // greedy token
  std::vector<std::pair<int32_t, float>> top;   // top-5 (id, logprob)
};

struct Golden {
  std::vector<int32_t> prompt_ids;
  std::vector<GoldenStep> steps;
  // From bf16_deviation.json (tools/reference/bf16_deviation.py): the largest change of a
  // golden top-5 logprob when the reference rounds its linear inputs to bf16, and when it also
  // makes its keys and values from a latent and rope key rounded to bf16 (a bf16 KV cache).
  double bf16_deviation = 0;
  double bf16_cache_deviation = 0;
};

// $MLASERVE_TEST_DATA/models/<variant>
std::string ModelDir(const std::string& variant);
// Variants present under $MLASERVE_TEST_DATA/models, sorted.
std::vector<std::string> ModelVariants();
// golden.json and bf16_deviation.json of a model directory.
absl::StatusOr<Golden> ReadGolden(const std::string& model_dir);

// log_softmax of one logits row, in double.
std::vector<double> LogSoftmax(absl::Span<const float> logits);

// One sequence's state for driving a runner by hand: tokens and a block table whose blocks
// are handed out from the top of the pool downwards, so logical and physical order differ.
struct TestSequence {
  std::vector<int32_t> tokens;
  int32_t num_computed = 0;
  std::vector<int32_t> block_table;
};

// Makes a block table covering `num_tokens` tokens from blocks [first_block, first_block + n),
// reversed.
std::vector<int32_t> ReversedBlocks(int32_t first_block, int32_t num_tokens, int32_t block_size);

}  // namespace mlaserve::testing

#endif  // MLASERVE_TESTS_ENGINE_MODEL_TEST_UTIL_H_
