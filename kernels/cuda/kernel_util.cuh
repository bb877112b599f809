// Device helpers shared by the simple-op kernels: f32/bf16 element access and a block-wide sum.
// Included by .cu files only (device code, compiled by nvcc or against the simulator).
#ifndef MLASERVE_KERNELS_CUDA_KERNEL_UTIL_CUH_
#define MLASERVE_KERNELS_CUDA_KERNEL_UTIL_CUH_

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace mlaserve::MLASERVE_CUDA_NS {

// Threads per block of the row-wise kernels: a multiple of the warp size.
inline constexpr int kRowThreads = 128;

// Element i of an f32 (bf16 == false) or bf16 array, as f32.
__device__ inline float LoadAsF32(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
              : static_cast<const float*>(p)[i];
}

// Stores v into element i of an f32 or bf16 array (bf16: round to nearest even).
__device__ inline void StoreFromF32(void* p, bool bf16, int64_t i, float v) {
  if (bf16) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// The sum of every thread's v over the block, returned to every thread. blockDim.x must be a
// multiple of 32 and at most 1024; every thread of the block must call it. The order of the
// additions depends only on blockDim.x (xor shuffles within warps, then warp 0 over the warp
// partials), so a row reduced by a fixed block size always rounds the same way.
__device__ inline float BlockSum(float v) {
  MLASERVE_SHARED(float, partial, [32]);
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = lane < num_warps ? partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) {
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  }
  __syncthreads();  // partial may be reused by the caller's next BlockSum
  return total;
}

// The max of every thread's v over the block (as BlockSum; every thread must call it).
__device__ inline float BlockMax(float v) {
  MLASERVE_SHARED(float, partial, [32]);
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float best = lane < num_warps ? partial[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset /= 2) {
    best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
  }
  __syncthreads();
  return best;
}

// Blocks for a grid-stride loop over n elements with `threads` per block.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_KERNEL_UTIL_CUH_
