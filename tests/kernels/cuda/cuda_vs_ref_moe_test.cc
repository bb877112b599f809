// CudaBackend MoE ops against the oracle, through the shared parity bodies
// (tests/kernels/parity/moe_parity.cc): routing for every scoring and top-k method, block
// alignment (bit-exact), and the routed experts with bf16 and f32 expert weights in f32 and
// bf16 activations.
#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

using CudaMoeTest = CudaVsRefTest;

TEST_F(CudaMoeTest, RouteMatchesRef) { ExpectMoeRouteMatchesRef(parity()); }

TEST_F(CudaMoeTest, AlignMatchesRefExactly) { ExpectMoeAlignMatchesRefExactly(parity()); }

TEST_F(CudaMoeTest, ExpertsMatchRef) { ExpectMoeExpertsMatchRef(parity()); }

TEST_F(CudaMoeTest, BatchInvariantDecodeTokensDoNotDependOnTheirCompany) {
  ExpectMoeExpertsDecodeTokensInvariant(ref(), cuda_invariant());
}

}  // namespace
}  // namespace mlaserve::test
