// RmsNorm (+ residual): residual = x + residual; out = residual * rsqrt(mean(residual²) + eps)
// * weight, with x + addend in place of x where an addend is given, or the same over x without
// residual (kernels/params.h RmsNormParams; matches RefBackend::RunRmsNorm, which accumulates
// in double: here f32).
// Grid: one block per row; block: kRowThreads threads, thread i owning elements i, i + blockDim,
// ... of the row in both passes. Shared memory: BlockSum's 32 floats. out may alias x: each
// element is read by the thread that later writes it, and x is not read after the first pass
// when a residual exists. Rows may be strided (innermost contiguous); weight f32 or bf16.
// The sum of squares runs in a fixed order per row (batch invariant).
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

// x, residual (nullable), addend (nullable; only with residual), out: [rows, dim] f32 with row
// strides; weight: [dim] f32|bf16.
__global__ void RmsNormKernel(const float* x, int64_t x_stride, float* residual,
                              int64_t residual_stride, const float* addend,
                              int64_t addend_stride, const void* weight, bool weight_bf16,
                              float eps, int64_t dim, float* out, int64_t out_stride) {
  const int64_t row = blockIdx.x;
  const float* src = x + row * x_stride;
  float* res = residual == nullptr ? nullptr : residual + row * residual_stride;
  const float* add = addend == nullptr ? nullptr : addend + row * addend_stride;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = src[i];
    if (add != nullptr) v += add[i];  // rounded before the residual is added, as Add would
    if (res != nullptr) {
      v += res[i];
      res[i] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  const float* normed = res != nullptr ? res : src;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    out[row * out_stride + i] = normed[i] * inv_rms * LoadAsF32(weight, weight_bf16, i);
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  const RowsShape shape = CheckRmsNorm(p);
  const int64_t rows = shape.rows, dim = shape.cols;
  const bool has_residual = !p.residual.empty(), has_addend = !p.addend.empty();
  if (rows == 0 || dim == 0) return cudaSuccess;
  return Launch(
      RmsNormKernel, dim3(static_cast<unsigned>(rows)), dim3(kRowThreads), 0, stream,
      p.x.ptr<const float>(), p.x.stride(0), has_residual ? p.residual.ptr<float>() : nullptr,
      has_residual ? p.residual.stride(0) : int64_t{0},
      has_addend ? p.addend.ptr<const float>() : nullptr,
      has_addend ? p.addend.stride(0) : int64_t{0}, static_cast<const void*>(p.weight.data()),
      p.weight.dtype() == DType::kBF16, p.eps, dim, p.out.ptr<float>(), p.out.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
