// CudaBackend::Gemm: picks cuBLAS or the tiled kernel (see kernels/cuda/cuda_backend.h).
//
// Row-major out[m, n] = a[m, k] · b[n, k]ᵀ is column-major outᵀ[n, m] = bᵀ·a: cuBLAS sees b as a
// column-major k x n matrix (ld = b's row stride) used transposed, a as a column-major k x m
// matrix (ld = a's row stride) used as is, and writes an n x m matrix with ld = out's row stride.
#include <algorithm>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/simple_ops.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

// bf16 weights with f32 activations: calls of at most this many rows (decode steps of up to 64
// sequences) stream the weights through the GEMV kernel, 8 rows per pass over a warp's weight
// row (later passes find it in cache); more rows go through the tiled kernel, which reads the
// weights at 160-215 GB/s (docs/performance.md: 16 streams 1.34x on an H200 with 64 here).
constexpr int64_t kGemvMaxRows = 64;

// The problem of p with 2-D operands seen as batch 1 (batch stride 0).
GemmProblem ProblemOf(const GemmParams& p, const GemmShape& s) {
  auto batch_stride = [](const TensorView& v) { return v.ndim() == 3 ? v.stride(0) : 0; };
  auto row_stride = [](const TensorView& v) { return v.stride(v.ndim() - 2); };
  return GemmProblem{.a = p.a.ptr<const float>(),
                     .a_batch_stride = batch_stride(p.a),
                     .a_row_stride = row_stride(p.a),
                     .b = p.b.data(),
                     .b_bf16 = p.b.dtype() == DType::kBF16,
                     .b_batch_stride = batch_stride(p.b),
                     .b_row_stride = row_stride(p.b),
                     .out = p.out.ptr<float>(),
                     .out_batch_stride = batch_stride(p.out),
                     .out_row_stride = row_stride(p.out),
                     .batch = s.batch,
                     .m = s.m,
                     .n = s.n,
                     .k = s.k};
}

// Rows [row0, m) of g as a problem of their own.
GemmProblem RowsFrom(GemmProblem g, int64_t row0) {
  g.a += row0 * g.a_row_stride;
  g.out += row0 * g.out_row_stride;
  g.m -= row0;
  return g;
}

// Whether cuBLAS accepts the problem's leading dimensions and sizes (int32 arguments).
bool CublasCanRun(const GemmProblem& g) {
  constexpr int64_t kMax = INT32_MAX;
  return g.a_row_stride >= g.k && g.b_row_stride >= g.k && g.out_row_stride >= g.n &&
         g.m <= kMax && g.n <= kMax && g.k <= kMax && g.a_row_stride <= kMax &&
         g.b_row_stride <= kMax && g.out_row_stride <= kMax && g.batch <= kMax;
}

}  // namespace

void CudaBackend::Gemm(const GemmParams& p) {
  const GemmShape s = CheckGemm(p);
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  GemmProblem g = ProblemOf(p, s);
  const bool round = RoundsGemmInput(activation_dtype_, p.b.dtype());
  if (batch_invariant_) {  // decode rows by the GEMV kernel, prompt rows by the tiled one
    const int64_t d = std::clamp<int64_t>(p.decode_rows, 0, s.m);
    Record(LaunchRowsGemv(g, 0, d, round, stream_), "Gemm (decode rows)");
    if (d < s.m) Record(LaunchTiledGemm(RowsFrom(g, d), round, stream_), "Gemm");
    return;
  }
  if (g.b_bf16 && !round && s.m <= kGemvMaxRows) {
    Record(LaunchRowsGemv(g, 0, s.m, /*round_a=*/false, stream_), "Gemm (few rows)");
    return;
  }
  const bool fits = static_cast<uint64_t>(s.batch * s.m * s.k) * sizeof(__nv_bfloat16) <=
                    kGemmStagingBytes;
  if (s.k == 0 || !CublasCanRun(g) || (g.b_bf16 && !fits)) {
    Record(LaunchTiledGemm(g, round, stream_), "Gemm");
    return;
  }
  if (!g.b_bf16) {
    Cublas(g, g.a, CUDA_R_32F, g.a_row_stride, g.a_batch_stride, 0.0f);
    return;
  }
  // bf16 weights on the tensor cores, a staged as bf16 in a contiguous [batch, m, k] buffer:
  // rounded once (bf16 activations), or (f32 activations) cut exactly into three bf16 parts,
  // each multiplied in turn and added into out, so every product is exact as on the other paths.
  constexpr Bf16Stage kParts[] = {Bf16Stage::kHi, Bf16Stage::kMid, Bf16Stage::kLo};
  for (int q = 0; q < (round ? 1 : 3); ++q) {
    Record(LaunchStageBf16(g, round ? Bf16Stage::kRound : kParts[q], gemm_staging_, stream_),
           "Gemm (stage bf16)");
    Cublas(g, gemm_staging_, CUDA_R_16BF, g.k, g.m * g.k, q == 0 ? 0.0f : 1.0f);
  }
}

void CudaBackend::Cublas(const GemmProblem& g, const void* a, cudaDataType_t ab_type,
                         int64_t lda, int64_t a_batch_stride, float beta) {
  const float alpha = 1.0f;
  const int n = static_cast<int>(g.n), m = static_cast<int>(g.m), k = static_cast<int>(g.k);
  if (g.batch == 1) {
    RecordCublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, g.b, ab_type,
                              static_cast<int>(g.b_row_stride), a, ab_type, static_cast<int>(lda),
                              &beta, g.out, CUDA_R_32F, static_cast<int>(g.out_row_stride),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "Gemm (cublasGemmEx)");
  } else {
    RecordCublas(cublasGemmStridedBatchedEx(
                     cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, g.b, ab_type,
                     static_cast<int>(g.b_row_stride), g.b_batch_stride, a, ab_type,
                     static_cast<int>(lda), a_batch_stride, &beta, g.out, CUDA_R_32F,
                     static_cast<int>(g.out_row_stride), g.out_batch_stride,
                     static_cast<int>(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "Gemm (cublasGemmStridedBatchedEx)");
  }
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
