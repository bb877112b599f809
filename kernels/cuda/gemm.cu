// GEMM kernels of CudaBackend::Gemm (kernels/cuda/cuda_gemm.cc; matches RefBackend::RunGemm,
// which accumulates in double; here f32).
// TiledGemmKernel: out[bi] = a[bi] · b[bi]ᵀ. Grid: (ceil(n/16), ceil(m/16), batch); block: 16x16
//   threads, thread (x, y) owning out[y0 + y, x0 + x]. Shared memory: one 16x17 f32 tile of a and
//   one of b (2.2 KB; the pad column avoids bank conflicts), refilled per 16-wide k step with a
//   barrier before and after use. b may be f32 or bf16 (read directly); with round_a, a is
//   rounded to bf16 (nearest even) on load (kBF16 activations). Each output element sums its k
//   products in increasing k order with fmaf, whatever m is: batch invariant. Operands are
//   row-major with arbitrary row and batch strides (innermost contiguous).
// RowsGemvKernel: rows [row_begin, row_end) of out[bi] = a[bi] · b[bi]ᵀ, for the few rows of a
//   decode step. Grid: (ceil(n/4), batch); block: 4 warps, warp w owning output column
//   blockIdx.x * 4 + w for every row. Lane l takes the 8-element k groups l, l + 32, l + 64, ...
//   of the column's weight row (one 16-byte load each when b and a are aligned and k % 8 == 0,
//   the kernel's kFull instance; four groups in flight) and sums, per row, its products in increasing k order with fmaf; the
//   32 lane sums then meet in a fixed xor-shuffle tree. Rows go 8 at a time, each with its own accumulator, so a row's
//   result depends on its own data alone, never on how many rows share the call: batch
//   invariant (a second order, distinct from the tiled kernel's, for decode rows). No shared
//   memory; a is read through the cache (every warp of a block reads the same rows).
// RoundToBf16Kernel: packs a rounded to bf16 into a contiguous [batch, m, k] staging buffer for
//   cuBLAS (grid-stride loop, 256-thread blocks, no shared memory).
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kTile = 16;

__global__ void TiledGemmKernel(GemmProblem g, bool round_a) {
  MLASERVE_SHARED(float, a_tile, [kTile][kTile + 1]);
  MLASERVE_SHARED(float, b_tile, [kTile][kTile + 1]);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t bi = blockIdx.z;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const float* a = g.a + bi * g.a_batch_stride;
  const int64_t b_base = bi * g.b_batch_stride;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < g.k; k0 += kTile) {
    const int64_t l = k0 + tx;
    float av = 0.0f, bv = 0.0f;
    if (row0 + ty < g.m && l < g.k) {
      av = a[(row0 + ty) * g.a_row_stride + l];
      if (round_a) av = __bfloat162float(__float2bfloat16(av));
    }
    if (col0 + ty < g.n && l < g.k) {
      bv = LoadAsF32(g.b, g.b_bf16, b_base + (col0 + ty) * g.b_row_stride + l);
    }
    a_tile[ty][tx] = av;
    b_tile[ty][tx] = bv;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(a_tile[ty][kk], b_tile[tx][kk], acc);
    __syncthreads();
  }
  if (row0 + ty < g.m && col0 + tx < g.n) {
    g.out[bi * g.out_batch_stride + (row0 + ty) * g.out_row_stride + col0 + tx] = acc;
  }
}

constexpr int kGemvWarps = 4;  // output columns per block, one warp each
constexpr int kGemvRows = 8;   // rows of a per pass over a weight row
constexpr int kGroup = 8;      // consecutive k elements a lane takes at a time

// Elements e0 .. e0 + 7 of an f32 or bf16 row as f32 (one or two 16-byte loads when `vec`:
// e0 + 8 <= k and 16-byte aligned). Without `vec` elements at or past k are left unset.
__device__ inline void LoadGroup(const void* row, bool bf16, bool vec, int64_t e0, int64_t k,
                                 float v[kGroup]) {
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
    for (int i = 0; i < kGroup; ++i) {
      if (e0 + i < k) v[i] = LoadAsF32(row, bf16, e0 + i);
    }
  }
}

// Adds to acc[r], for each of the first `rows` rows of a, the products with the N weight groups
// at e0, e0 + 256, ... (each starting inside k), group by group in increasing k order. The N
// weight loads are issued before any arithmetic, so N 16-byte loads per lane are in flight.
// kFull: every group lies inside k and both operands take 16-byte loads. Every loop has a
// constant trip count, so the arrays stay in registers.
template <int N, bool kFull>
__device__ inline void AccumulateGroups(const void* b_row, bool b_bf16, const float* a,
                                        int64_t a_row_stride, bool round_a, int rows, int64_t e0,
                                        int64_t k, float acc[kGemvRows]) {
  constexpr int64_t kStride = 32 * kGroup;
  float w[N][kGroup];
  for (int j = 0; j < N; ++j) LoadGroup(b_row, b_bf16, kFull, e0 + j * kStride, k, w[j]);
  for (int r = 0; r < kGemvRows; ++r) {
    if (r < rows) {
      for (int j = 0; j < N; ++j) {
        const int64_t ej = e0 + j * kStride;
        float x[kGroup];
        LoadGroup(a + r * a_row_stride, false, kFull, ej, k, x);
        for (int i = 0; i < kGroup; ++i) {
          if (kFull || ej + i < k) {
            const float xv = round_a ? __bfloat162float(__float2bfloat16(x[i])) : x[i];
            acc[r] = fmaf(xv, w[j][i], acc[r]);
          }
        }
      }
    }
  }
}

template <bool kFull>
__global__ void RowsGemvKernel(GemmProblem g, int64_t row_begin, int64_t row_end, bool round_a) {
  constexpr int kUnroll = 4;
  constexpr int64_t kStride = 32 * kGroup;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (col >= g.n) return;  // the whole warp leaves together
  const int64_t bi = blockIdx.y;
  const int64_t b_offset = bi * g.b_batch_stride + col * g.b_row_stride;
  const void* b_row = g.b_bf16 ? static_cast<const void*>(
                                     static_cast<const __nv_bfloat16*>(g.b) + b_offset)
                               : static_cast<const void*>(static_cast<const float*>(g.b) + b_offset);
  float* out = g.out + bi * g.out_batch_stride + col;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kGemvRows) {
    const int rows = static_cast<int>(row_end - r0 < kGemvRows ? row_end - r0 : kGemvRows);
    const float* a = g.a + bi * g.a_batch_stride + r0 * g.a_row_stride;
    float acc[kGemvRows] = {};
    int64_t e0 = static_cast<int64_t>(lane) * kGroup;
    for (; e0 + (kUnroll - 1) * kStride < g.k; e0 += kUnroll * kStride) {
      AccumulateGroups<kUnroll, kFull>(b_row, g.b_bf16, a, g.a_row_stride, round_a, rows, e0,
                                       g.k, acc);
    }
    for (; e0 < g.k; e0 += kStride) {
      AccumulateGroups<1, kFull>(b_row, g.b_bf16, a, g.a_row_stride, round_a, rows, e0, g.k, acc);
    }
    for (int r = 0; r < kGemvRows; ++r) {
      for (int offset = 16; offset > 0; offset /= 2) {
        acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
      }
      if (lane == 0 && r < rows) out[(r0 + r) * g.out_row_stride] = acc[r];
    }
  }
}

__global__ void RoundToBf16Kernel(GemmProblem g, __nv_bfloat16* dst) {
  const int64_t total = g.batch * g.m * g.k;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = e % g.k, i = (e / g.k) % g.m, bi = e / (g.k * g.m);
    dst[e] = __float2bfloat16(g.a[bi * g.a_batch_stride + i * g.a_row_stride + l]);
  }
}

}  // namespace

cudaError_t LaunchTiledGemm(const GemmProblem& g, bool round_a, cudaStream_t stream) {
  MLASERVE_CHECK(g.batch <= 65535 && (g.m + kTile - 1) / kTile <= 65535);
  const dim3 grid(static_cast<unsigned>((g.n + kTile - 1) / kTile),
                  static_cast<unsigned>((g.m + kTile - 1) / kTile),
                  static_cast<unsigned>(g.batch));
  return Launch(TiledGemmKernel, grid, dim3(kTile, kTile), 0, stream, g, round_a);
}

cudaError_t LaunchRowsGemv(const GemmProblem& g, int64_t row_begin, int64_t row_end,
                           bool round_a, cudaStream_t stream) {
  MLASERVE_CHECK(g.batch <= 65535 && (g.n + kGemvWarps - 1) / kGemvWarps <= INT32_MAX);
  if (row_begin >= row_end) return cudaSuccess;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t b_size = g.b_bf16 ? 2 : 4;
  const bool k_groups = g.k % kGroup == 0;
  const bool vec_b = k_groups && aligned16(g.b) && (g.b_row_stride * b_size) % 16 == 0 &&
                     (g.b_batch_stride * b_size) % 16 == 0;
  const bool vec_a = k_groups && aligned16(g.a) && g.a_row_stride % 4 == 0 &&
                     g.a_batch_stride % 4 == 0;
  const dim3 grid(static_cast<unsigned>((g.n + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(g.batch));
  const dim3 block(32 * kGemvWarps);
  if (vec_a && vec_b) {
    return Launch(RowsGemvKernel<true>, grid, block, 0, stream, g, row_begin, row_end, round_a);
  }
  return Launch(RowsGemvKernel<false>, grid, block, 0, stream, g, row_begin, row_end, round_a);
}

cudaError_t LaunchRoundToBf16(const GemmProblem& g, __nv_bfloat16* dst, cudaStream_t stream) {
  constexpr int kThreads = 256;
  return Launch(RoundToBf16Kernel, dim3(GridFor(g.batch * g.m * g.k, kThreads)), dim3(kThreads),
                0, stream, g, dst);
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
