// CpuGemm's guided claims: a team hands out a large GEMM's column panels in claims that shrink
// as the work runs out, so which thread computes which columns, and where each call's range
// starts, change from run to run. On every kernel build this processor runs (and the AMX build
// over software tiles), with f32 and bf16 weights, one and four decode rows, batch-invariant
// (`--deterministic`) or not: a two-thread backend gives bit for bit the result of a one-thread
// backend (a single call over every column), run after run, and both are within f32 rounding
// of sums in double precision.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/cpu_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve {
namespace {

using test::RandomTensor;
using test::TestTensor;

class GemmClaimsTest : public test::CpuVsRefTest {};

// n columns make far more panels than the claims need (every build's panel is at most 32
// columns, at least 256 KiB of weights per claim), and an odd tail.
constexpr int64_t kN = 8195;
constexpr int64_t kK = 2048;
constexpr int kRuns = 4;

TEST_P(GemmClaimsTest, TwoThreadsGiveTheOneThreadBits) {
  for (const bool invariant : {true, false}) {
    for (const DType weights : {DType::kBF16, DType::kF32}) {
      for (const int64_t m : {1, 4}) {
        SCOPED_TRACE(testing::Message() << "batch_invariant " << invariant << ", weights "
                                        << DTypeName(weights) << ", rows " << m);
        const std::unique_ptr<CpuBackend> one = NewCpu(1, invariant);
        const std::unique_ptr<CpuBackend> two = NewCpu(2, invariant);
        std::mt19937 rng(static_cast<uint32_t>(m * 7 + (weights == DType::kBF16)));
        const TestTensor a = RandomTensor(*one, rng, DType::kF32, {m, kK});
        const TestTensor b = RandomTensor(*one, rng, weights, {kN, kK});
        TestTensor out_one(*one, DType::kF32, {m, kN});
        one->Gemm({.a = a.view(), .b = b.view(), .out = out_one.view(), .decode_rows = m});
        const std::vector<float> expected = out_one.Read();

        // Within f32 rounding of double-precision sums: the bits compared below are a GEMM's.
        const std::vector<float> av = a.Read(), bv = b.Read();
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < kN; j += 1021) {
            double sum = 0.0, magnitude = 0.0;
            for (int64_t x = 0; x < kK; ++x) {
              sum += static_cast<double>(av[i * kK + x]) * bv[j * kK + x];
              magnitude += std::fabs(static_cast<double>(av[i * kK + x]) * bv[j * kK + x]);
            }
            ASSERT_NEAR(expected[i * kN + j], sum, 1e-5 * magnitude) << i << ", " << j;
          }
        }

        const TestTensor a2 = a.CloneTo(*two), b2 = b.CloneTo(*two);
        for (int run = 0; run < kRuns; ++run) {
          TestTensor out_two(*two, DType::kF32, {m, kN});
          two->Gemm({.a = a2.view(), .b = b2.view(), .out = out_two.view(), .decode_rows = m});
          const std::vector<float> got = out_two.Read();
          int64_t differ = 0, first = -1;
          for (size_t e = 0; e < got.size(); ++e) {
            if (got[e] != expected[e]) {
              if (first < 0) first = static_cast<int64_t>(e);
              ++differ;
            }
          }
          EXPECT_EQ(differ, 0) << "run " << run << ": first at row " << first / kN
                               << ", column " << first % kN;
        }
      }
    }
  }
}

MLASERVE_INSTANTIATE_CPU_ISAS(GemmClaimsTest);

}  // namespace
}  // namespace mlaserve
