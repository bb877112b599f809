// The CUDA backend of the engine-level tests (goldens, decode graphs, batch invariance). Where
// the CUDA Toolkit is installed each of those tests is built twice from one source
// (tests/CMakeLists.txt): as <name> with MLASERVE_TEST_CUDA_SIM, its kernels run by the SIMT
// simulator beside the ref and CPU backends, and as <name>_gpu with MLASERVE_TEST_CUDA_GPU,
// where the backend-parameterized tests take the CUDA runtime's backend alone (label `gpu`;
// every test skips where no device exists). Neither macro: built without the Toolkit, and the
// CUDA instances skip.
#ifndef MLASERVE_TESTS_ENGINE_CUDA_TEST_BACKEND_H_
#define MLASERVE_TESTS_ENGINE_CUDA_TEST_BACKEND_H_

#include <memory>

#include "gtest/gtest.h"
#include "kernels/backend.h"

#if defined(MLASERVE_TEST_CUDA_SIM) || defined(MLASERVE_TEST_CUDA_GPU)
#include "kernels/cuda/cuda_backend_factory.h"
#endif
#ifdef MLASERVE_TEST_CUDA_GPU
#include "kernels/cuda/device_info.h"
#endif

namespace mlaserve::testing {

// Whether this build runs the CUDA backend, and whether it runs nothing else.
#if defined(MLASERVE_TEST_CUDA_SIM) || defined(MLASERVE_TEST_CUDA_GPU)
inline constexpr bool kCudaBuilt = true;
#else
inline constexpr bool kCudaBuilt = false;
#endif
#ifdef MLASERVE_TEST_CUDA_GPU
inline constexpr bool kCudaOnly = true;
inline constexpr const char* kCudaBackendName = "cuda";
#else
inline constexpr bool kCudaOnly = false;
inline constexpr const char* kCudaBackendName = "cuda_sim";
#endif

// The CUDA backend of this build, or null (with a test failure) if it cannot start; null
// without one where the build has no CUDA backend.
inline std::unique_ptr<Backend> NewCudaTestBackend(bool batch_invariant,
                                                   DType activation_dtype = DType::kF32) {
#if defined(MLASERVE_TEST_CUDA_SIM) || defined(MLASERVE_TEST_CUDA_GPU)
#ifdef MLASERVE_TEST_CUDA_GPU
  namespace cuda_build = ::mlaserve::cuda;
#else
  namespace cuda_build = ::mlaserve::cuda_sim;
#endif
  auto backend = cuda_build::NewCudaBackend(
      {.batch_invariant = batch_invariant, .activation_dtype = activation_dtype});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
#else
  return nullptr;
#endif
}

#ifdef MLASERVE_TEST_CUDA_GPU
// Skips every test of a `_gpu` binary on a machine without a CUDA device.
class CudaDeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};
inline ::testing::Environment* const kCudaDeviceEnvironment =
    ::testing::AddGlobalTestEnvironment(new CudaDeviceEnvironment);
#endif

}  // namespace mlaserve::testing

#endif  // MLASERVE_TESTS_ENGINE_CUDA_TEST_BACKEND_H_
