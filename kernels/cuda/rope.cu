// ApplyRope in place (kernels/params.h RopeParams; matches RefBackend::RunApplyRope): each
// head's rope_dim values are de-interleaved and rotated with rotate_half,
//   y[i] = x[2i] cos - x[2i+1] sin,  y[i + d/2] = x[2i+1] cos + x[2i] sin,
// with cos/sin from row positions[t] of the contiguous [max_positions, rope_dim] table.
// Grid: (num_tokens, num_heads + num_heads2), x2's heads after x's; block: 32 threads. Shared
// memory: the head (at most kMaxRopeDim floats), loaded whole before any write because results
// land on other threads' inputs. x and x2 may be strided over tokens and heads (innermost
// contiguous). A position outside
// the table (a caller bug the ref aborts on) leaves the head unchanged.
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kMaxRopeDim = 512;

// x: [num_tokens, num_heads, rope_dim] f32 (strides x_t, x_h), then x2 (nullable; strides
// x2_t, x2_h) for blocks y >= num_heads; positions: [num_tokens] i32; cos_sin:
// [max_positions, rope_dim] f32 contiguous.
__global__ void RopeKernel(float* x, int64_t x_t, int64_t x_h, int64_t num_heads, float* x2,
                           int64_t x2_t, int64_t x2_h, const int32_t* positions,
                           int64_t pos_stride, const float* cos_sin, int64_t max_positions,
                           int64_t rope_dim) {
  MLASERVE_SHARED(float, head, [kMaxRopeDim]);
  const int32_t pos = positions[blockIdx.x * pos_stride];
  if (pos < 0 || pos >= max_positions) return;  // uniform over the block
  const int64_t h = blockIdx.y;
  float* v = h < num_heads ? x + blockIdx.x * x_t + h * x_h
                           : x2 + blockIdx.x * x2_t + (h - num_heads) * x2_h;
  for (int64_t i = threadIdx.x; i < rope_dim; i += blockDim.x) head[i] = v[i];
  __syncthreads();
  const int64_t half = rope_dim / 2;
  const float* cos = cos_sin + pos * rope_dim;
  const float* sin = cos + half;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float even = head[2 * i], odd = head[2 * i + 1];
    v[i] = even * cos[i] - odd * sin[i];
    v[i + half] = odd * cos[i] + even * sin[i];
  }
}

}  // namespace

cudaError_t LaunchApplyRope(const RopeParams& p, cudaStream_t stream) {
  const RopeShape shape = CheckRope(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads;
  const int64_t heads = num_heads + shape.num_heads2, rope_dim = shape.rope_dim;
  const bool has_x2 = shape.num_heads2 > 0;
  MLASERVE_CHECK(rope_dim <= kMaxRopeDim);
  if (num_tokens == 0 || heads == 0 || rope_dim == 0) return cudaSuccess;
  MLASERVE_CHECK(heads <= 65535);
  return Launch(RopeKernel, dim3(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads)),
                dim3(32), 0, stream, p.x.ptr<float>(), p.x.stride(0), p.x.stride(1), num_heads,
                has_x2 ? p.x2.ptr<float>() : nullptr, has_x2 ? p.x2.stride(0) : int64_t{0},
                has_x2 ? p.x2.stride(1) : int64_t{0}, p.positions.ptr<const int32_t>(),
                p.positions.stride(0), p.cos_sin.ptr<const float>(), p.cos_sin.size(0), rope_dim);
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
