// Launchers of the simple ops (embedding, norms, elementwise, copy, rope, KV cache, GEMM
// kernels), one .cu per op family. Each checks shapes and dtypes against kernels/params.h
// (MLASERVE_CHECK), then only enqueues work on `stream`: no allocation, no synchronisation, no
// host read of device data, so every launcher is legal during stream capture. Returns the
// launch error (cudaSuccess when enqueued or when there is nothing to do).
#ifndef MLASERVE_KERNELS_CUDA_SIMPLE_OPS_H_
#define MLASERVE_KERNELS_CUDA_SIMPLE_OPS_H_

#include "kernels/cuda/compat.cuh"
#include "kernels/params.h"
#include "kernels/tensor.h"

namespace mlaserve::MLASERVE_CUDA_NS {

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream);  // embedding.cu
cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);      // rms_norm.cu
cudaError_t LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream);      // elementwise.cu
cudaError_t LaunchAdd(const AddParams& p, cudaStream_t stream);              // elementwise.cu
cudaError_t LaunchCopy(const CopyParams& p, cudaStream_t stream);            // copy.cu
cudaError_t LaunchApplyRope(const RopeParams& p, cudaStream_t stream);       // rope.cu
cudaError_t LaunchWriteKvCache(const KvWriteParams& p, cudaStream_t stream);     // kv_cache.cu
cudaError_t LaunchGatherKvCache(const GatherKvParams& p, cudaStream_t stream);   // kv_cache.cu
cudaError_t LaunchTopLogprobs(const TopLogprobsParams& p, cudaStream_t stream);  // sampling.cu
cudaError_t LaunchSampleTokens(const SampleTokensParams& p, cudaStream_t stream);  // sampling.cu

// gemm.cu. A GEMM problem as the kernels see it: row-major, innermost stride 1, batch stride 0
// for a 2-D operand.
struct GemmProblem {
  const float* a;   // [batch, m, k] f32
  int64_t a_batch_stride, a_row_stride;
  const void* b;    // [batch, n, k] f32 or bf16 (b_bf16)
  bool b_bf16;
  int64_t b_batch_stride, b_row_stride;
  float* out;       // [batch, m, n] f32
  int64_t out_batch_stride, out_row_stride;
  int64_t batch, m, n, k;
};
// out = a · bᵀ by a shared-memory tiled kernel (f32 accumulation, one fixed reduction order per
// output element whatever m is); with round_a, every a element is first rounded to bf16.
cudaError_t LaunchTiledGemm(const GemmProblem& g, bool round_a, cudaStream_t stream);
// Rows [row_begin, row_end) of out = a · bᵀ by one warp per output column (few rows: decode
// steps). Each row's elements have one reduction order, whatever rows share the call (a different
// order from LaunchTiledGemm's); with round_a, a is rounded to bf16 first. Other rows untouched.
cudaError_t LaunchRowsGemv(const GemmProblem& g, int64_t row_begin, int64_t row_end,
                           bool round_a, cudaStream_t stream);
// What LaunchStageBf16 writes of each element a of a: kRound, bf16(a) (nearest even); kHi, kMid
// and kLo, the parts of a exactly split into three bf16 values, a = hi + mid + lo (hi = a cut
// to its top 16 bits, mid = a - hi cut the same way, lo = a - hi - mid, at most 8 significant
// bits; both differences exact): each part's product with a bf16 weight is exact in f32.
enum class Bf16Stage { kRound, kHi, kMid, kLo };
// dst[(bi * m + i) * k + l] = `stage` of a[bi, i, l]: a packed into a contiguous bf16 staging
// buffer of batch * m * k elements.
cudaError_t LaunchStageBf16(const GemmProblem& g, Bf16Stage stage, __nv_bfloat16* dst,
                            cudaStream_t stream);

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_SIMPLE_OPS_H_
