// Warp-per-column dot products for the few rows of a decode step, shared by the dense GEMV
// (gemm.cu, RowsGemvKernel) and the routed experts' GEMV (moe.cu, ExpertGemvKernel). Device
// code; included by .cu files only.
//
// One warp computes one output column j for up to kRows rows: lane l takes the 8-element k
// groups l, l + 32, l + 64, ... of weight row j, four groups' loads in flight, and sums each row's
// products in increasing k order with fmaf; the 32 lane sums then meet in a fixed xor-shuffle
// tree. A row's result therefore depends on its own data, k and the weight row alone, never on
// the other rows of the pass or of the call (batch invariant), nor on whether the loads were
// 16-byte vectors (kFull) or scalars: both visit the same elements in the same order.
#ifndef MLASERVE_KERNELS_CUDA_GEMV_CUH_
#define MLASERVE_KERNELS_CUDA_GEMV_CUH_

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/kernel_util.cuh"

namespace mlaserve::MLASERVE_CUDA_NS {

inline constexpr int kGemvGroup = 8;  // consecutive k elements a lane takes at a time
inline constexpr int kGemvWarps = 4;  // output columns per block of the GEMV kernels, one warp each

// Whether rows of depth k starting at `base`, `strides_bytes` apart in each dimension, can be read
// in whole 16-byte groups (the kernels' kFull instances): k a multiple of the group, the base
// 16-byte aligned and every stride a multiple of 16 bytes.
inline bool GemvFullGroups(int64_t k, const void* base,
                           std::initializer_list<int64_t> strides_bytes) {
  if (k % kGemvGroup != 0 || reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (int64_t s : strides_bytes) {
    if (s % 16 != 0) return false;
  }
  return true;
}

// Element `offset` of an f32 or bf16 weight array, as the untyped row pointer the kernels take.
__device__ inline const void* GemvRow(const void* w, bool bf16, int64_t offset) {
  return bf16 ? static_cast<const void*>(static_cast<const __nv_bfloat16*>(w) + offset)
              : static_cast<const void*>(static_cast<const float*>(w) + offset);
}

// Elements e0 .. e0 + 7 of an f32 or bf16 row as f32 (one or two 16-byte loads when `vec`:
// e0 + 8 <= k and 16-byte aligned). Without `vec` elements at or past k are left unset.
__device__ inline void LoadGroup(const void* row, bool bf16, bool vec, int64_t e0, int64_t k,
                                 float v[kGemvGroup]) {
  if (vec && bf16) {
    const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(row) + e0);
    const unsigned words[4] = {q.x, q.y, q.z, q.w};
    for (int i = 0; i < 4; ++i) {  // bf16 -> f32 is exact: the bf16 bits are the f32's high half
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else if (vec) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(row) + e0);
    const float4 lo = q[0], hi = q[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
    v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
    for (int i = 0; i < kGemvGroup; ++i) {
      if (e0 + i < k) v[i] = LoadAsF32(row, bf16, e0 + i);
    }
  }
}

// Adds to acc[r], for each of the first `rows` rows a_rows[r], the products with the N weight
// groups at e0, e0 + 256, ... (each starting inside k), group by group in increasing k order.
// The N weight loads are issued before any arithmetic. kFull: every group lies inside k and both
// operands take 16-byte loads. Every loop has a constant trip count, so the arrays stay in
// registers.
template <int N, bool kFull, int kRows>
__device__ inline void AccumulateGroups(const void* w_row, bool w_bf16,
                                        const float* const (&a_rows)[kRows], bool round_a,
                                        int rows, int64_t e0, int64_t k, float (&acc)[kRows]) {
  constexpr int64_t kStride = 32 * kGemvGroup;
  float w[N][kGemvGroup];
  for (int j = 0; j < N; ++j) LoadGroup(w_row, w_bf16, kFull, e0 + j * kStride, k, w[j]);
  for (int r = 0; r < kRows; ++r) {
    if (r < rows) {
      for (int j = 0; j < N; ++j) {
        const int64_t ej = e0 + j * kStride;
        float x[kGemvGroup];
        LoadGroup(a_rows[r], false, kFull, ej, k, x);
        for (int i = 0; i < kGemvGroup; ++i) {
          if (kFull || ej + i < k) {
            const float xv = round_a ? __bfloat162float(__float2bfloat16(x[i])) : x[i];
            acc[r] = fmaf(xv, w[j][i], acc[r]);
          }
        }
      }
    }
  }
}

// acc[r] = a_rows[r] · w_row (length k) for r < rows, in lane 0 of the calling warp (the other
// lanes hold the same sums in other association orders: use lane 0's). Every lane of the warp
// must call it with the same arguments (it ends in full-warp shuffles); round_a rounds each
// a element to bf16 first.
template <bool kFull, int kRows>
__device__ inline void WarpDotRows(const void* w_row, bool w_bf16,
                                   const float* const (&a_rows)[kRows], bool round_a, int rows,
                                   int64_t k, float (&acc)[kRows]) {
  constexpr int kUnroll = 4;
  constexpr int64_t kStride = 32 * kGemvGroup;
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  int64_t e0 = static_cast<int64_t>(threadIdx.x % 32) * kGemvGroup;
  for (; e0 + (kUnroll - 1) * kStride < k; e0 += kUnroll * kStride) {
    AccumulateGroups<kUnroll, kFull, kRows>(w_row, w_bf16, a_rows, round_a, rows, e0, k, acc);
  }
  for (; e0 < k; e0 += kStride) {
    AccumulateGroups<1, kFull, kRows>(w_row, w_bf16, a_rows, round_a, rows, e0, k, acc);
  }
  for (int r = 0; r < kRows; ++r) {
    for (int offset = 16; offset > 0; offset /= 2) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    }
  }
}

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_GEMV_CUH_
