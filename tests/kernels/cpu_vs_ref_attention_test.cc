// CpuBackend MLA attention against the oracle, through the shared parity bodies
// (tests/kernels/parity/attention_parity.cc): prefill, the log-sum-exp merge and absorbed
// decode over a shuffled paged cache.
#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

using CpuAttentionTest = CpuVsRefTest;

TEST_P(CpuAttentionTest, PrefillMatchesRef) { ExpectMlaPrefillMatchesRef(parity()); }

TEST_P(CpuAttentionTest, MergeMatchesRefIncludingInfiniteLse) {
  ExpectMergeAttnMatchesRef(parity());
}

TEST_P(CpuAttentionTest, DecodeMatchesRef) { ExpectMlaDecodeMatchesRef(parity()); }

// --deterministic: whole sequences per item, heads cut into one group per thread.
TEST_P(CpuAttentionTest, BatchInvariantDecodeMatchesRef) {
  ExpectMlaDecodeMatchesRef({ref(), ref_bf16(), cpu_invariant(), cpu_bf16()});
}

MLASERVE_INSTANTIATE_CPU_ISAS(CpuAttentionTest);

}  // namespace
}  // namespace mlaserve::test
