// CudaBackend MLA attention against the oracle, through the shared parity bodies
// (tests/kernels/parity/attention_parity.cc): prefill, the log-sum-exp merge and absorbed
// decode over a shuffled paged cache.
#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

using CudaAttentionTest = CudaVsRefTest;

TEST_F(CudaAttentionTest, PrefillMatchesRef) { ExpectMlaPrefillMatchesRef(parity()); }

TEST_F(CudaAttentionTest, MergeMatchesRefIncludingInfiniteLse) {
  ExpectMergeAttnMatchesRef(parity());
}

TEST_F(CudaAttentionTest, DecodeMatchesRef) { ExpectMlaDecodeMatchesRef(parity()); }

}  // namespace
}  // namespace mlaserve::test
