// Launch(kernel, grid, block, smem, stream, args...): `kernel<<<grid, block, smem,
// stream>>>(args...)` under nvcc, and the same launch executed (or, on a capturing stream,
// recorded) by the SIMT simulator otherwise. Arguments are converted to the kernel's parameter
// types and copied by value at the call, as CUDA does. Returns the launch's error
// (cudaGetLastError()).
#ifndef MLASERVE_KERNELS_CUDA_LAUNCH_CUH_
#define MLASERVE_KERNELS_CUDA_LAUNCH_CUH_

#include <cstddef>
#include <utility>

#include "kernels/cuda/compat.cuh"

namespace mlaserve::MLASERVE_CUDA_NS {

template <typename... KArgs, typename... Args>
cudaError_t Launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "Launch: wrong number of kernel arguments");
#if defined(__CUDACC__)
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
#else
  return ::mlaserve::sim::LaunchKernel(kernel, grid, block, smem_bytes, stream,
                                       std::forward<Args>(args)...);
#endif
}

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_LAUNCH_CUH_
