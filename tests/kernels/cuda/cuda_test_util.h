// Fixture shared by the CUDA-against-oracle tests. Every tests/kernels/cuda/*_test.cc is built
// twice (tests/CMakeLists.txt): `<name>_sim` runs the CUDA backend on the SIMT simulator
// (MLASERVE_CUDA_SIM, label cuda-sim) and `<name>_gpu` on the real CUDA runtime (label gpu),
// where SetUp skips the test when no device exists. Inputs are made on the ref backend and
// cloned to the CUDA backend through CopyFromHost, so MLASERVE_POISON=1 applies to both.
#ifndef MLASERVE_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define MLASERVE_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend_factory.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {

// NewCudaBackend of the build under test (cuda_sim:: or cuda::).
absl::StatusOr<std::unique_ptr<Backend>> NewTestCudaBackend(const CudaBackendOptions& options);

class CudaVsRefTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // Every test ends with the CUDA backends reporting no device error.
  void TearDown() override;

  Backend& ref() { return *ref_; }
  Backend& cuda() { return *cuda_; }
  // batch_invariant set (--deterministic).
  Backend& cuda_invariant() { return *cuda_invariant_; }
  // Both backends with bf16 activations (--dtype=bfloat16).
  Backend& ref_bf16() { return *ref_bf16_; }
  Backend& cuda_bf16() { return *cuda_bf16_; }
  // The backends the shared parity bodies (tests/kernels/parity) compare.
  ParityBackends parity() { return {ref(), ref_bf16(), cuda(), cuda_bf16()}; }

 private:
  std::unique_ptr<Backend> ref_;
  std::unique_ptr<Backend> ref_bf16_;
  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cuda_invariant_;
  std::unique_ptr<Backend> cuda_bf16_;
};

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
