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
//   blockIdx.x * 4 + w for every row, through WarpDotRows (gemv.cuh: its order per element is
//   fixed whatever rows share the call, a second order beside the tiled kernel's, for decode
//   rows). Rows go up to 8 at a time; no shared memory (every warp of a block reads the same
//   rows of a, through the cache).
// StageBf16Kernel: packs a rounded to bf16, or one of its three exact bf16 parts, into a
//   contiguous [batch, m, k] staging buffer for cuBLAS (grid-stride loop, 256-thread blocks, no
//   shared memory).
#include "kernels/cuda/gemv.cuh"
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

constexpr int kGemvRows = 8;   // most rows of a per pass over a weight row

// kRows: rows per pass (accumulators per lane), the fewest registers that cover the call's rows.
template <bool kFull, int kRows>
__global__ void __launch_bounds__(32 * kGemvWarps)
    RowsGemvKernel(GemmProblem g, int64_t row_begin, int64_t row_end, bool round_a) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (col >= g.n) return;  // the whole warp leaves together
  const int64_t bi = blockIdx.y;
  const void* b_row = GemvRow(g.b, g.b_bf16, bi * g.b_batch_stride + col * g.b_row_stride);
  float* out = g.out + bi * g.out_batch_stride + col;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRows) {
    const int rows = static_cast<int>(row_end - r0 < kRows ? row_end - r0 : kRows);
    const float* a_rows[kRows];
    for (int r = 0; r < kRows; ++r) {
      a_rows[r] = g.a + bi * g.a_batch_stride + (r0 + (r < rows ? r : 0)) * g.a_row_stride;
    }
    float acc[kRows];
    WarpDotRows<kFull, kRows>(b_row, g.b_bf16, a_rows, round_a, rows, g.k, acc);
    if (threadIdx.x % 32 != 0) continue;
    for (int r = 0; r < kRows; ++r) {
      if (r < rows) out[(r0 + r) * g.out_row_stride] = acc[r];
    }
  }
}

// x with its low 16 bits cleared: a bf16 value, exactly.
__device__ __forceinline__ float TopBf16(float x) {
  return __uint_as_float(__float_as_uint(x) & 0xffff0000u);
}

__global__ void StageBf16Kernel(GemmProblem g, Bf16Stage stage, __nv_bfloat16* dst) {
  const int64_t total = g.batch * g.m * g.k;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = e % g.k, i = (e / g.k) % g.m, bi = e / (g.k * g.m);
    const float a = g.a[bi * g.a_batch_stride + i * g.a_row_stride + l];
    float part = a;  // kRound
    if (stage != Bf16Stage::kRound) {
      const float hi = TopBf16(a), rest = a - hi, mid = TopBf16(rest);
      part = stage == Bf16Stage::kHi ? hi : stage == Bf16Stage::kMid ? mid : rest - mid;
    }
    // A part is a bf16 already, so the conversion leaves it as it is.
    dst[e] = __float2bfloat16(part);
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
  const int64_t b_size = g.b_bf16 ? 2 : 4, a_size = 4;
  const bool full =
      GemvFullGroups(g.k, g.b, {g.b_row_stride * b_size, g.b_batch_stride * b_size}) &&
      GemvFullGroups(g.k, g.a, {g.a_row_stride * a_size, g.a_batch_stride * a_size});
  const dim3 grid(static_cast<unsigned>((g.n + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(g.batch));
  const dim3 block(32 * kGemvWarps);
  const int64_t rows = row_end - row_begin;
  auto launch = [&](auto kernel) {
    return Launch(kernel, grid, block, 0, stream, g, row_begin, row_end, round_a);
  };
  if (full) {
    if (rows == 1) return launch(RowsGemvKernel<true, 1>);
    if (rows == 2) return launch(RowsGemvKernel<true, 2>);
    if (rows <= 4) return launch(RowsGemvKernel<true, 4>);
    return launch(RowsGemvKernel<true, kGemvRows>);
  }
  return launch(RowsGemvKernel<false, kGemvRows>);
}

cudaError_t LaunchStageBf16(const GemmProblem& g, Bf16Stage stage, __nv_bfloat16* dst,
                            cudaStream_t stream) {
  constexpr int kThreads = 256;
  return Launch(StageBf16Kernel, dim3(GridFor(g.batch * g.m * g.k, kThreads)), dim3(kThreads),
                0, stream, g, stage, dst);
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
