// The SIMT simulator as CUDA source sees it (included by kernels/cuda/compat.cuh when
// MLASERVE_CUDA_SIM is defined): the Toolkit's own headers for every type and declaration (so
// bf16 conversions are CUDA's own code), the device built-ins (device.h), and the runtime and
// cuBLAS subset (runtime.h, cublas.h) with the global names routed to them by macro. What the
// simulator models and checks: executor.h; what it does not: README.md beside this file.
#ifndef MLASERVE_KERNELS_CUDA_SIM_SIM_H_
#define MLASERVE_KERNELS_CUDA_SIM_SIM_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <typeinfo>
#include <utility>

#include "kernels/cuda/sim/cublas.h"
#include "kernels/cuda/sim/device.h"
#include "kernels/cuda/sim/executor.h"
#include "kernels/cuda/sim/runtime.h"

namespace mlaserve::sim {

// The demangled name of `kernel`'s type, for error messages (the address alone names nothing).
std::string KernelName(const void* kernel, const std::type_info& type);

// Launches `kernel` on the simulator: arguments are converted to the kernel's parameter types and
// copied now, by value; on a capturing stream the launch is recorded with those copies.
template <typename... KArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                         cudaStream_t stream, Args&&... args) {
  if (cudaError_t e = CheckDynamicShared(reinterpret_cast<const void*>(kernel), smem_bytes);
      e != cudaSuccess) {
    return e;
  }
  LaunchSpec spec;
  spec.kernel_name = KernelName(reinterpret_cast<const void*>(kernel), typeid(kernel));
  spec.grid = grid;
  spec.block = block;
  spec.dynamic_smem_bytes = smem_bytes;
  spec.body = [kernel, copied = std::tuple<std::decay_t<KArgs>...>(std::forward<Args>(args)...)] {
    std::apply(kernel, copied);
  };
  return Enqueue(stream, [spec = std::move(spec)] { return RunLaunch(spec); });
}

}  // namespace mlaserve::sim

// The runtime and cuBLAS by their own names (cublas_v2.h already maps cublasCreate and friends
// to their _v2 names).
#define cudaMalloc ::mlaserve::sim::cudaMalloc
#define cudaFree ::mlaserve::sim::cudaFree
#define cudaMallocHost ::mlaserve::sim::cudaMallocHost
#define cudaHostAlloc ::mlaserve::sim::cudaHostAlloc
#define cudaFreeHost ::mlaserve::sim::cudaFreeHost
#define cudaMemcpy ::mlaserve::sim::cudaMemcpy
#define cudaMemcpyAsync ::mlaserve::sim::cudaMemcpyAsync
#define cudaMemset ::mlaserve::sim::cudaMemset
#define cudaMemsetAsync ::mlaserve::sim::cudaMemsetAsync
#define cudaMemGetInfo ::mlaserve::sim::cudaMemGetInfo
#define cudaGetDeviceCount ::mlaserve::sim::cudaGetDeviceCount
#define cudaSetDevice ::mlaserve::sim::cudaSetDevice
#define cudaGetDevice ::mlaserve::sim::cudaGetDevice
#define cudaGetDeviceProperties ::mlaserve::sim::cudaGetDeviceProperties
#define cudaDeviceGetAttribute ::mlaserve::sim::cudaDeviceGetAttribute
#define cudaFuncSetAttribute ::mlaserve::sim::cudaFuncSetAttribute
#define cudaDeviceSynchronize ::mlaserve::sim::cudaDeviceSynchronize
#define cudaDeviceReset ::mlaserve::sim::cudaDeviceReset
#define cudaStreamCreate ::mlaserve::sim::cudaStreamCreate
#define cudaStreamCreateWithFlags ::mlaserve::sim::cudaStreamCreateWithFlags
#define cudaStreamDestroy ::mlaserve::sim::cudaStreamDestroy
#define cudaStreamSynchronize ::mlaserve::sim::cudaStreamSynchronize
#define cudaStreamBeginCapture ::mlaserve::sim::cudaStreamBeginCapture
#define cudaStreamEndCapture ::mlaserve::sim::cudaStreamEndCapture
#define cudaStreamIsCapturing ::mlaserve::sim::cudaStreamIsCapturing
#define cudaGraphInstantiate ::mlaserve::sim::cudaGraphInstantiate
#define cudaGraphLaunch ::mlaserve::sim::cudaGraphLaunch
#define cudaGraphExecDestroy ::mlaserve::sim::cudaGraphExecDestroy
#define cudaGraphDestroy ::mlaserve::sim::cudaGraphDestroy
#define cudaEventCreate ::mlaserve::sim::cudaEventCreate
#define cudaEventCreateWithFlags ::mlaserve::sim::cudaEventCreateWithFlags
#define cudaEventRecord ::mlaserve::sim::cudaEventRecord
#define cudaEventSynchronize ::mlaserve::sim::cudaEventSynchronize
#define cudaEventElapsedTime ::mlaserve::sim::cudaEventElapsedTime
#define cudaEventDestroy ::mlaserve::sim::cudaEventDestroy
#define cudaGetLastError ::mlaserve::sim::cudaGetLastError
#define cudaPeekAtLastError ::mlaserve::sim::cudaPeekAtLastError
#define cudaGetErrorString ::mlaserve::sim::cudaGetErrorString
#define cudaGetErrorName ::mlaserve::sim::cudaGetErrorName
#define cublasCreate_v2 ::mlaserve::sim::cublasCreate_v2
#define cublasDestroy_v2 ::mlaserve::sim::cublasDestroy_v2
#define cublasSetStream_v2 ::mlaserve::sim::cublasSetStream_v2
#define cublasSetMathMode ::mlaserve::sim::cublasSetMathMode
#define cublasSetWorkspace_v2 ::mlaserve::sim::cublasSetWorkspace_v2
#define cublasGetStatusString ::mlaserve::sim::cublasGetStatusString
#define cublasGemmEx ::mlaserve::sim::cublasGemmEx
#define cublasGemmStridedBatchedEx ::mlaserve::sim::cublasGemmStridedBatchedEx
#define cublasGemmBatchedEx ::mlaserve::sim::cublasGemmBatchedEx

#endif  // MLASERVE_KERNELS_CUDA_SIM_SIM_H_
