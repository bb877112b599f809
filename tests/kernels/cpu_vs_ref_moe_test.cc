// CpuBackend MoE ops against the oracle, through the shared parity bodies
// (tests/kernels/parity/moe_parity.cc): routing for every scoring and top-k method, block
// alignment (bit-exact), and the routed experts with bf16 and f32 expert weights in f32 and
// bf16 activations.
#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

using CpuMoeTest = CpuVsRefTest;

TEST_P(CpuMoeTest, RouteMatchesRef) { ExpectMoeRouteMatchesRef(parity()); }

TEST_P(CpuMoeTest, AlignMatchesRefExactly) { ExpectMoeAlignMatchesRefExactly(parity()); }

TEST_P(CpuMoeTest, ExpertsMatchRef) { ExpectMoeExpertsMatchRef(parity()); }

TEST_P(CpuMoeTest, BatchInvariantDecodeTokensDoNotDependOnTheirCompany) {
  ExpectMoeExpertsDecodeTokensInvariant(ref(), cpu_invariant());
}

// Sixteen threads: column slices of a few panels, and threads left without a slice where
// an expert is narrower than the team.
TEST_P(CpuMoeTest, ExpertsMatchRefOnSixteenThreads) {
  const std::unique_ptr<CpuBackend> cpu16 = NewCpu(16);
  const std::unique_ptr<CpuBackend> cpu16_bf16 =
      NewCpu(16, /*batch_invariant=*/false, DType::kBF16);
  ExpectMoeExpertsMatchRef({ref(), ref_bf16(), *cpu16, *cpu16_bf16});
}

// The same with bf16 activations, whose decode rows take the bf16 dot product on builds with
// AVX512_BF16 (cpu_dot_bf16_impl.h).
TEST_P(CpuMoeTest, BatchInvariantBf16DecodeTokensDoNotDependOnTheirCompany) {
  ExpectMoeExpertsDecodeTokensInvariant(ref_bf16(), cpu_invariant_bf16());
}

MLASERVE_INSTANTIATE_CPU_ISAS(CpuMoeTest);

}  // namespace
}  // namespace mlaserve::test
