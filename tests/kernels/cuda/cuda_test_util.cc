#include "tests/kernels/cuda/cuda_test_util.h"

#include <tuple>
#include <utility>

#include "kernels/ref/ref_backend.h"
#ifndef MLASERVE_CUDA_SIM
#include "kernels/cuda/device_info.h"
#endif

namespace mlaserve::test {

absl::StatusOr<std::unique_ptr<Backend>> NewTestCudaBackend(const CudaBackendOptions& options) {
#ifdef MLASERVE_CUDA_SIM
  return cuda_sim::NewCudaBackend(options);
#else
  return cuda::NewCudaBackend(options);
#endif
}

void CudaVsRefTest::SetUp() {
#ifndef MLASERVE_CUDA_SIM
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
#endif
  ref_ = MakeRefBackend();
  ref_bf16_ = MakeRefBackend(DType::kBF16);
  for (auto [slot, invariant, dtype] :
       {std::tuple{&cuda_, false, DType::kF32}, std::tuple{&cuda_invariant_, true, DType::kF32},
        std::tuple{&cuda_bf16_, false, DType::kBF16}}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        NewTestCudaBackend({.batch_invariant = invariant, .activation_dtype = dtype});
    ASSERT_TRUE(backend.ok()) << backend.status();
    *slot = std::move(*backend);
  }
}

void CudaVsRefTest::TearDown() {
  for (Backend* b : {cuda_.get(), cuda_invariant_.get(), cuda_bf16_.get()}) {
    if (b == nullptr) continue;
    const absl::Status s = b->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace mlaserve::test
