// Factory of the CUDA backend, free of CUDA headers so that server code can include it.
// Two definitions exist, one per library built from the same source: cuda::NewCudaBackend in
// mlaserve_kernels_cuda (nvcc, the real CUDA runtime and cuBLAS) and cuda_sim::NewCudaBackend in
// mlaserve_kernels_cuda_sim (the SIMT simulator running the kernels on the host).
#ifndef MLASERVE_KERNELS_CUDA_CUDA_BACKEND_FACTORY_H_
#define MLASERVE_KERNELS_CUDA_CUDA_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"

namespace mlaserve {

struct CudaBackendOptions {
  int device = 0;                // CUDA device ordinal
  bool batch_invariant = false;  // see Backend::batch_invariant (`--deterministic`)
  DType activation_dtype = DType::kF32;  // kF32 or kBF16 (see Backend::activation_dtype)
};

namespace cuda {
// A backend on device `options.device`; an error when there is no such device or start-up
// allocation (workspaces, cuBLAS handle, stream) fails.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaBackendOptions& options);
}  // namespace cuda

namespace cuda_sim {
// The same backend running on the simulator (for tests and `--backend=cuda-sim`).
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaBackendOptions& options);
}  // namespace cuda_sim

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CUDA_CUDA_BACKEND_FACTORY_H_
