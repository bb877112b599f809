// TopLogprobs on the device (kernels/params.h TopLogprobsParams; oracle: kernels/ref/
// ref_sampling.cc): greedy selection and logprobs, so that a decode step copies back k ids and
// k logprobs per row instead of the vocabulary's logits.
//
// One block of kThreads threads per row, grid-stride over the vocabulary (the row read
// coalesced, innermost stride 1). Pass 1: block max; pass 2: Σ exp(x - max), so
// lse = max + log(sum) in f32. Then k selection passes: pass i finds the best (logit, id) among
// the entries that rank strictly after pass i-1's pick in the order (logit descending, id
// ascending), so no selected set is kept and ties resolve to the lower id as on the host. Each
// pass is a thread-local scan plus a (value, id) warp-shuffle and shared-memory reduction.
// No shared memory beyond the reductions' 32 pairs; no workspace. Cost: (k + 2) reads of the
// row; k <= 20 (the API's top_logprobs bound) in the engine, k = 1 for greedy rows only.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// Whether (v, i) ranks before (w, j): larger logit first, then the lower id.
__device__ inline bool RanksBefore(float v, int i, float w, int j) {
  return v > w || (v == w && i < j);
}

// The best (value, id) pair over the block, returned to every thread (as BlockSum).
__device__ void BlockBest(float& value, int& id) {
  MLASERVE_SHARED(float, best_value, [32]);
  MLASERVE_SHARED(int, best_id, [32]);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, id, offset);
    if (RanksBefore(v, i, value, id)) {
      value = v;
      id = i;
    }
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  if (lane == 0) {
    best_value[warp] = value;
    best_id[warp] = id;
  }
  __syncthreads();
  value = lane < num_warps ? best_value[lane] : -INFINITY;
  id = lane < num_warps ? best_id[lane] : INT32_MAX;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, id, offset);
    if (RanksBefore(v, i, value, id)) {
      value = v;
      id = i;
    }
  }
  __syncthreads();
}

__global__ void TopLogprobsKernel(const float* logits, int64_t l_s0, int vocab, int k,
                                  int32_t* top_ids, int64_t i_s0, float* top_logprobs,
                                  int64_t p_s0) {
  const int r = blockIdx.x, t = threadIdx.x;
  const float* row = logits + r * l_s0;
  float local_max = -INFINITY;
  for (int v = t; v < vocab; v += kThreads) local_max = fmaxf(local_max, row[v]);
  const float max = BlockMax(local_max);
  float local_sum = 0.0f;
  for (int v = t; v < vocab; v += kThreads) local_sum += __expf(row[v] - max);
  const float lse = max + logf(BlockSum(local_sum));
  float prev_value = INFINITY;  // pass i's pick must rank strictly after (prev_value, prev_id)
  int prev_id = -1;
  for (int i = 0; i < k; ++i) {
    float value = -INFINITY;
    int id = INT32_MAX;
    for (int v = t; v < vocab; v += kThreads) {
      const float x = row[v];
      if (RanksBefore(prev_value, prev_id, x, v) && RanksBefore(x, v, value, id)) {
        value = x;
        id = v;
      }
    }
    BlockBest(value, id);
    if (t == 0) {
      top_ids[r * i_s0 + i] = id;
      top_logprobs[r * p_s0 + i] = value - lse;
    }
    prev_value = value;
    prev_id = id;
  }
}

}  // namespace

cudaError_t LaunchTopLogprobs(const TopLogprobsParams& p, cudaStream_t stream) {
  const TopLogprobsShape shape = CheckTopLogprobs(p);
  if (shape.rows == 0) return cudaSuccess;
  return Launch(TopLogprobsKernel, dim3(static_cast<unsigned>(shape.rows)), dim3(kThreads), 0,
                stream, p.logits.ptr<const float>(), p.logits.stride(0),
                static_cast<int>(shape.vocab), static_cast<int>(shape.k),
                p.top_ids.ptr<int32_t>(), p.top_ids.stride(0), p.top_logprobs.ptr<float>(),
                p.top_logprobs.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
