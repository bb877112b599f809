#include "tests/kernels/cpu_test_util.h"

#include <cstdlib>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/ref_backend.h"

namespace mlaserve::test {

void CpuVsRefTest::SetUp() {
  if (GetParam() == kAmxEmulated) {
    if (DetectCpuIsa() < CpuIsa::kAvx512Bf16) {
      GTEST_SKIP() << "the emulated AMX kernels need AVX512_BF16";
    }
    const CpuKernels& k = AmxEmulatedKernels();
    cpu_ = std::make_unique<CpuBackend>(k, kThreads);
    cpu_invariant_ = std::make_unique<CpuBackend>(k, kThreads, /*batch_invariant=*/true);
    cpu_bf16_ = std::make_unique<CpuBackend>(k, kThreads, /*batch_invariant=*/false, DType::kBF16);
    cpu_invariant_bf16_ =
        std::make_unique<CpuBackend>(k, kThreads, /*batch_invariant=*/true, DType::kBF16);
  } else {
    ::setenv("MLASERVE_CPU_ISA", GetParam().c_str(), 1);
    cpu_ = std::make_unique<CpuBackend>(kThreads);
    cpu_invariant_ = std::make_unique<CpuBackend>(kThreads, /*batch_invariant=*/true);
    cpu_bf16_ = std::make_unique<CpuBackend>(kThreads, /*batch_invariant=*/false, DType::kBF16);
    cpu_invariant_bf16_ =
        std::make_unique<CpuBackend>(kThreads, /*batch_invariant=*/true, DType::kBF16);
    ::unsetenv("MLASERVE_CPU_ISA");
    if (CpuIsaName(cpu_->isa()) != GetParam()) {
      GTEST_SKIP() << "this processor cannot run the " << GetParam() << " kernels";
    }
  }
  ref_ = MakeRefBackend();
  ref_bf16_ = MakeRefBackend(DType::kBF16);
}

}  // namespace mlaserve::test
