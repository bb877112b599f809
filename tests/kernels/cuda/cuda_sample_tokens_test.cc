// SampleTokens on the CUDA backend (bisection cuts, parallel Gumbel-max) against the host draw
// (kernels/ref: sampling::DrawToken, the CPU engine's sampler, a sort-based implementation):
// the same tokens row for row over temperatures, top-k, top-p, min-p and their combinations,
// seeds and positions, vocabularies not a multiple of the block, rows with tied logits; the
// drawn token's logprob within f32 rounding of the host's double log-sum-exp.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sampling_math.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaSampleTokensTest = CudaVsRefTest;

std::vector<int32_t> OptionWords(const std::vector<sampling::RowOptions>& rows) {
  std::vector<int32_t> words(rows.size() * 8);
  std::memcpy(words.data(), rows.data(), words.size() * sizeof(int32_t));
  return words;
}

TEST_F(CudaSampleTokensTest, DrawsMatchTheHost) {
  std::mt19937 rng(11);
  struct Cut {
    float temperature, top_p, min_p;
    int32_t top_k;
  };
  const std::vector<Cut> cuts = {
      {0.0f, 1.0f, 0.0f, 0},  {1.0f, 1.0f, 0.0f, 0},   {0.7f, 1.0f, 0.0f, 5},
      {1.3f, 0.9f, 0.0f, 0},  {1.0f, 0.5f, 0.0f, 40},  {0.9f, 1.0f, 0.05f, 0},
      {1.0f, 0.8f, 0.02f, 7}, {2.0f, 0.3f, 0.0f, 1},   {1.0f, 1.0f, 0.0f, 1000},
  };
  for (const int64_t vocab : {int64_t{7}, int64_t{300}, int64_t{1000}}) {
    for (const int32_t distinct : {0, 4}) {
      std::vector<sampling::RowOptions> rows;
      for (const Cut& c : cuts) {
        for (int position : {0, 3, 17}) {
          rows.push_back({.temperature = c.temperature,
                          .top_p = c.top_p,
                          .min_p = c.min_p,
                          .top_k = c.top_k,
                          .seed_low = static_cast<uint32_t>(rng()),
                          .seed_high = static_cast<uint32_t>(rng()),
                          .position = position,
                          .unused = 0});
        }
      }
      const auto n = static_cast<int64_t>(rows.size());
      SCOPED_TRACE("vocab=" + std::to_string(vocab) + " distinct=" + std::to_string(distinct));
      std::vector<float> values = RandomFloats(rng, n * vocab, -4.0f, 4.0f);
      if (distinct > 0) {  // a few values only: many ties
        for (float& v : values) v = std::floor((v + 4.0f) * distinct / 8.0f);
      }
      TestTensor logits(ref(), DType::kF32, {n, vocab});
      logits.Write(values);
      TestTensor options = IntTensor(ref(), {n, 8}, OptionWords(rows));
      TestTensor ids_ref(ref(), DType::kI32, {n});
      TestTensor lp_ref(ref(), DType::kF32, {n});
      ref().SampleTokens({.logits = logits.view(),
                          .options = options.view(),
                          .token_ids = ids_ref.view(),
                          .logprobs = lp_ref.view()});
      TestTensor logits_c = logits.CloneTo(cuda()), options_c = options.CloneTo(cuda());
      TestTensor ids_c(cuda(), DType::kI32, {n});
      TestTensor lp_c(cuda(), DType::kF32, {n});
      cuda().SampleTokens({.logits = logits_c.view(),
                           .options = options_c.view(),
                           .token_ids = ids_c.view(),
                           .logprobs = lp_c.view()});
      EXPECT_EQ(ids_c.ReadInts(), ids_ref.ReadInts());
      ExpectClose(lp_c.Read(), lp_ref.Read(), 2e-5, 1e-5, "logprobs", lp_ref.shape());
    }
  }
}

}  // namespace
}  // namespace mlaserve::test
