// TopLogprobs on the CUDA backend against the oracle: ids identical (ties to the lower id,
// including rows of equal logits and ties across the k boundary), logprobs within f32 rounding
// of the oracle's double log-sum-exp; k from 1 to 20; vocabularies smaller than, equal to and
// not a multiple of the block; rows of a strided logits view.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaTopLogprobsTest = CudaVsRefTest;

struct SelectCase {
  int64_t rows, vocab, k;
  int32_t distinct;  // logits drawn from this many values (0: continuous), to force ties
};

TEST_F(CudaTopLogprobsTest, SelectionMatchesRef) {
  std::mt19937 rng(5);
  const std::vector<SelectCase> cases = {
      {1, 7, 1, 0},     {3, 256, 20, 0},  {4, 1000, 5, 0},  {2, 102400, 20, 0},
      {5, 300, 20, 3},  {2, 64, 20, 1},   {3, 513, 1, 2},   {1, 20, 20, 0},
  };
  for (const SelectCase& c : cases) {
    SCOPED_TRACE("rows=" + std::to_string(c.rows) + " vocab=" + std::to_string(c.vocab) +
                 " k=" + std::to_string(c.k) + " distinct=" + std::to_string(c.distinct));
    // Rows of a wider buffer: the view's row stride is vocab + 3.
    std::vector<float> values = RandomFloats(rng, c.rows * (c.vocab + 3), -8.0f, 8.0f);
    if (c.distinct > 0) {
      for (float& v : values) v = std::floor((v + 8.0f) * c.distinct / 16.0f);
    }
    TestTensor wide(ref(), DType::kF32, {c.rows, c.vocab + 3});
    wide.Write(values);
    const TensorView logits = wide.view().Slice(1, 2, c.vocab);
    TestTensor ids_ref(ref(), DType::kI32, {c.rows, c.k});
    TestTensor lp_ref(ref(), DType::kF32, {c.rows, c.k});
    ref().TopLogprobs({.logits = logits, .top_ids = ids_ref.view(), .top_logprobs = lp_ref.view()});
    TestTensor wide_c = wide.CloneTo(cuda());
    TestTensor ids_c(cuda(), DType::kI32, {c.rows, c.k});
    TestTensor lp_c(cuda(), DType::kF32, {c.rows, c.k});
    cuda().TopLogprobs({.logits = wide_c.view().Slice(1, 2, c.vocab),
                        .top_ids = ids_c.view(),
                        .top_logprobs = lp_c.view()});
    EXPECT_EQ(ids_c.ReadInts(), ids_ref.ReadInts());
    ExpectClose(lp_c.Read(), lp_ref.Read(), 2e-5, 1e-5, "logprobs", lp_ref.shape());
  }
}

TEST_F(CudaTopLogprobsTest, RanksByLogitThenLowerId) {
  // A hand-made row checked against values worked out here: three ties at the top, then two.
  TestTensor row(ref(), DType::kF32, {1, 6});
  row.Write(std::vector<float>{1.0f, 5.0f, 2.0f, 5.0f, 2.0f, 5.0f});
  TestTensor ids(cuda(), DType::kI32, {1, 5});
  TestTensor lp(cuda(), DType::kF32, {1, 5});
  TestTensor row_c = row.CloneTo(cuda());
  cuda().TopLogprobs({.logits = row_c.view(), .top_ids = ids.view(), .top_logprobs = lp.view()});
  EXPECT_EQ(ids.ReadInts(), (std::vector<int32_t>{1, 3, 5, 2, 4}));
  const double lse = std::log(std::exp(1.0) + 3 * std::exp(5.0) + 2 * std::exp(2.0));
  const std::vector<float> got = lp.Read();
  EXPECT_NEAR(got[0], 5.0 - lse, 1e-5);
  EXPECT_NEAR(got[3], 2.0 - lse, 1e-5);
}

}  // namespace
}  // namespace mlaserve::test
