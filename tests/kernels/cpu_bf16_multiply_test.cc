// The start-up choice between the avx512_bf16 build's VDPBF16PS and the avx512 build's FMAs for
// bf16 activations: made only where it is a choice, by the environment before the probe, from
// the probe's measured rates with its margin, once per process, and the backend runs what was
// chosen. (That both builds give the oracle's bf16-activation results is proven by the
// avx512_bf16 and avx512 instances of the cpu_vs_ref suites.)
#include "kernels/cpu/cpu_bf16_multiply.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::test {
namespace {

bool HasChoice() { return DetectCpuIsa() == CpuIsa::kAvx512Bf16; }

TEST(CpuBf16MultiplyTest, F32ActivationsAreNeverProbed) {
  ::unsetenv("MLASERVE_CPU_ISA");
  const Bf16MultiplyChoice choice = SelectIsaForActivations(DType::kF32);
  EXPECT_EQ(choice.source, "fixed");
  EXPECT_EQ(choice.isa, SelectCpuIsa());
  EXPECT_EQ(choice.dot_gflops, 0);
  EXPECT_EQ(choice.fma_gflops, 0);
}

TEST(CpuBf16MultiplyTest, TheEnvironmentPinsTheBuild) {
  if (!HasChoice()) GTEST_SKIP() << "the processor's best build is not avx512_bf16";
  for (const char* isa : {"avx512_bf16", "avx512"}) {
    ::setenv("MLASERVE_CPU_ISA", isa, 1);
    const Bf16MultiplyChoice choice = SelectIsaForActivations(DType::kBF16);
    EXPECT_EQ(CpuIsaName(choice.isa), isa);
    // avx512 is below the choice: nothing is chosen there.
    EXPECT_EQ(choice.source, std::string(isa) == "avx512" ? "fixed" : "MLASERVE_CPU_ISA");
    EXPECT_EQ(choice.dot_gflops, 0);
    CpuBackend cpu(1, /*batch_invariant=*/false, DType::kBF16);
    EXPECT_EQ(CpuIsaName(cpu.isa()), isa);
  }
  ::unsetenv("MLASERVE_CPU_ISA");
}

TEST(CpuBf16MultiplyTest, ProbeTakesTheFmasOnlyWhenClearlyFaster) {
  if (!HasChoice()) GTEST_SKIP() << "the processor's best build is not avx512_bf16";
  for (int run = 0; run < 3; ++run) {
    const Bf16MultiplyChoice choice = ProbeBf16Multiply();
    EXPECT_EQ(choice.source, "probe");
    EXPECT_GT(choice.dot_gflops, 1.0);
    EXPECT_GT(choice.fma_gflops, 1.0);
    const bool fma = choice.fma_gflops > kBf16FmaMargin * choice.dot_gflops;
    EXPECT_EQ(choice.isa, fma ? CpuIsa::kAvx512 : CpuIsa::kAvx512Bf16)
        << "dot " << choice.dot_gflops << " fma " << choice.fma_gflops << " GFLOP/s";
  }
}

TEST(CpuBf16MultiplyTest, Bf16BackendRunsTheRememberedChoice) {
  ::unsetenv("MLASERVE_CPU_ISA");
  const Bf16MultiplyChoice first = SelectIsaForActivations(DType::kBF16);
  const Bf16MultiplyChoice again = SelectIsaForActivations(DType::kBF16);
  EXPECT_EQ(first.isa, again.isa);
  EXPECT_EQ(first.dot_gflops, again.dot_gflops);  // probed once
  EXPECT_EQ(first.source, HasChoice() ? "probe" : "fixed");
  CpuBackend bf16(1, /*batch_invariant=*/false, DType::kBF16);
  EXPECT_EQ(bf16.isa(), first.isa);
  CpuBackend f32(1);
  EXPECT_EQ(f32.isa(), SelectCpuIsa());
}

}  // namespace
}  // namespace mlaserve::test
