// The one header every CUDA source of the project includes first (.cu kernels and the host code
// of kernels/cuda/). It compiles three ways, so that one text serves the device and the
// simulator (DESIGN.md, "CUDA without a GPU"):
//   - nvcc (__CUDACC__): the CUDA runtime, bf16 types and cuBLAS as they are;
//   - the host compiler with MLASERVE_CUDA_SIM: kernels/cuda/sim/sim.h, which keeps the Toolkit's
//     own headers for types and declarations and routes every runtime and cuBLAS call, and every
//     device built-in, to the SIMT simulator;
//   - the host compiler without it: host code of the real build (the runtime's host API).
// What differs between nvcc and the simulator is spelled with these macros:
//   MLASERVE_CUDA_NS                  namespace of the CUDA code: `cuda`, or `cuda_sim` under the
//                                     simulator, so both builds link into one binary
//   MLASERVE_SHARED(T, name, dims)    static shared memory, e.g. MLASERVE_SHARED(float, t,
//   [32][33]); MLASERVE_DYNAMIC_SHARED(T, name)  `T* name`: the launch's dynamic shared memory
//   (16-byte aligned)
#ifndef MLASERVE_KERNELS_CUDA_COMPAT_CUH_
#define MLASERVE_KERNELS_CUDA_COMPAT_CUH_

#if defined(__CUDACC__)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define MLASERVE_CUDA_NS cuda
#define MLASERVE_SHARED(T, name, dims) __shared__ T name dims
#define MLASERVE_DYNAMIC_SHARED(T, name)                         \
  extern __shared__ __align__(16) unsigned char name##_bytes_[]; \
  T* name = reinterpret_cast<T*>(name##_bytes_)
#elif defined(MLASERVE_CUDA_SIM)
#include "kernels/cuda/sim/sim.h"
#define MLASERVE_CUDA_NS cuda_sim
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define MLASERVE_CUDA_NS cuda
#endif

#endif  // MLASERVE_KERNELS_CUDA_COMPAT_CUH_
