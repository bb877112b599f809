// TopLogprobs and SampleTokens on the device (kernels/params.h; oracle: kernels/ref/
// ref_sampling.cc, which draws with the CPU engine's own sampling::DrawToken): so that a decode
// step copies back a token, its logprob and k alternatives per row instead of the vocabulary's
// logits.
//
// TopLogprobs:
// One block of kThreads threads per row, grid-stride over the vocabulary (the row read
// coalesced, innermost stride 1). Pass 1: block max; pass 2: Σ exp(x - max), so
// lse = max + log(sum) in f32. Then k selection passes: pass i finds the best (logit, id) among
// the entries that rank strictly after pass i-1's pick in the order (logit descending, id
// ascending), so no selected set is kept and ties resolve to the lower id as on the host. Each
// pass is a thread-local scan plus a (value, id) reduction over shared memory.
// No shared memory beyond the reductions' 32 pairs; no workspace. Cost: (k + 2) reads of the
// row; k <= 20 (the API's top_logprobs bound) in the engine.
//
// SampleTokens: one block of kThreads per row, and no sort. The host keeps a prefix of the rank
// order (sampling::RankKey); here each cut is a threshold on the key found by bisection over
// the 64-bit key space, each probe one pass over the row with a block reduction: top-k is the
// k-th largest key (count of keys >= t at least k), top-p the largest t whose kept mass
// (Σ exp((x - max) / T) in double over keys >= t) reaches top_p of the total; min-p is a
// per-token test. Then one pass takes the Gumbel-max argmax over the kept tokens (double
// scores, ties to the lower id). Cost: 3 passes, plus 64 per cut in use (in L2 after the first
// on a GPU). The sums run in another order than the host's, so a cut can differ from the host's
// only when the mass lands within double rounding of the threshold.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/sampling_math.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// The combination of every thread's v over the block by `combine` (associative and
// commutative), returned to every thread: a tree over shared memory, kThreads a power of two.
template <typename T, typename Combine>
__device__ T BlockReduce(T v, Combine combine) {
  MLASERVE_SHARED(T, slots, [kThreads]);
  const int t = threadIdx.x;
  slots[t] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) slots[t] = combine(slots[t], slots[t + stride]);
    __syncthreads();
  }
  const T out = slots[0];
  __syncthreads();
  return out;
}

struct Candidate {
  double score;
  int id;
};

// Whether a ranks before b: the larger score, then the lower id.
__device__ inline bool RanksBefore(Candidate a, Candidate b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

__device__ inline Candidate Better(Candidate a, Candidate b) { return RanksBefore(a, b) ? a : b; }

// The row's max and log Σ exp, in f32 (every thread gets both).
__device__ void RowMaxAndLse(const float* row, int vocab, float& max, float& lse) {
  float local_max = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += kThreads) local_max = fmaxf(local_max, row[v]);
  max = BlockMax(local_max);
  float local_sum = 0.0f;
  for (int v = threadIdx.x; v < vocab; v += kThreads) local_sum += __expf(row[v] - max);
  lse = max + logf(BlockSum(local_sum));
}

__global__ void TopLogprobsKernel(const float* logits, int64_t l_s0, int vocab, int k,
                                  int32_t* top_ids, int64_t i_s0, float* top_logprobs,
                                  int64_t p_s0) {
  const int r = blockIdx.x, t = threadIdx.x;
  const float* row = logits + r * l_s0;
  float max, lse;
  RowMaxAndLse(row, vocab, max, lse);
  // Pass i's pick must rank strictly after pass i-1's (score descending, id ascending).
  Candidate prev{INFINITY, -1};
  for (int i = 0; i < k; ++i) {
    Candidate best{-INFINITY, vocab};
    for (int v = t; v < vocab; v += kThreads) {
      const Candidate c{row[v], v};
      if (RanksBefore(prev, c) && RanksBefore(c, best)) best = c;
    }
    best = BlockReduce(best, [](Candidate a, Candidate b) { return Better(a, b); });
    if (t == 0) {
      top_ids[r * i_s0 + i] = best.id;
      top_logprobs[r * p_s0 + i] = static_cast<float>(best.score) - lse;
    }
    prev = best;
  }
}

// Tokens the cuts keep: key >= min_key, and p >= min_p unless it is the best token.
struct KeptSet {
  const float* row;
  int vocab;
  float max, temperature, min_p;
  uint64_t top_key, min_key;

  __device__ bool Keeps(int v, uint64_t key) const {
    if (key < min_key) return false;
    return key == top_key || min_p <= 0.0f ||
           sampling::RelativeProbability(row[v], max, temperature) >= min_p;
  }
  // Σ of relative probabilities over kept tokens with key >= t.
  __device__ double MassFrom(uint64_t t) const {
    double mass = 0.0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const uint64_t key = sampling::RankKey(row[v], v);
      if (key >= t && Keeps(v, key)) {
        mass += sampling::RelativeProbability(row[v], max, temperature);
      }
    }
    return BlockReduce(mass, [](double a, double b) { return a + b; });
  }
};

// The largest t with count(keys >= t) >= k: the k-th largest key of the row.
__device__ uint64_t KthLargestKey(const float* row, int vocab, int k) {
  uint64_t lo = 0, hi = ~uint64_t{0};
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2 + 1;
    int count = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) count += sampling::RankKey(row[v], v) >= mid;
    count = BlockReduce(count, [](int a, int b) { return a + b; });
    if (count >= k) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void SampleTokensKernel(const float* logits, int64_t l_s0, int vocab,
                                   const sampling::RowOptions* options, int32_t* token_ids,
                                   int64_t t_s0, float* logprobs, int64_t p_s0) {
  const int r = blockIdx.x, t = threadIdx.x;
  const float* row = logits + r * l_s0;
  const sampling::RowOptions o = options[r];
  float max, lse;
  RowMaxAndLse(row, vocab, max, lse);
  uint64_t top_key = 0;
  for (int v = t; v < vocab; v += kThreads) {
    const uint64_t key = sampling::RankKey(row[v], v);
    top_key = key > top_key ? key : top_key;
  }
  top_key = BlockReduce(top_key, [](uint64_t a, uint64_t b) { return a > b ? a : b; });
  int token = static_cast<int>(0xffffffffu - static_cast<uint32_t>(top_key));  // the argmax
  if (o.temperature != 0.0f) {
    KeptSet kept{row, vocab, max, o.temperature, o.min_p, top_key, 0};
    if (o.top_k > 0 && o.top_k < vocab) kept.min_key = KthLargestKey(row, vocab, o.top_k);
    if (o.top_p < 1.0f) {
      const double target = o.top_p * kept.MassFrom(0);
      uint64_t lo = kept.min_key, hi = top_key;  // the largest t with MassFrom(t) >= target
      while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2 + 1;
        if (kept.MassFrom(mid) >= target) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      kept.min_key = lo;
    }
    const uint64_t seed = (uint64_t{o.seed_high} << 32) | o.seed_low;
    Candidate best{-INFINITY, vocab};
    for (int v = t; v < vocab; v += kThreads) {
      if (!kept.Keeps(v, sampling::RankKey(row[v], v))) continue;
      best = Better(best, {sampling::DrawScore(row[v], max, o.temperature, seed,
                                               static_cast<uint64_t>(o.position), v),
                           v});
    }
    token = BlockReduce(best, [](Candidate a, Candidate b) { return Better(a, b); }).id;
  }
  if (t == 0) {
    token_ids[r * t_s0] = token;
    logprobs[r * p_s0] = row[token] - lse;
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

cudaError_t LaunchSampleTokens(const SampleTokensParams& p, cudaStream_t stream) {
  const RowsShape shape = CheckSampleTokens(p);
  if (shape.rows == 0) return cudaSuccess;
  return Launch(SampleTokensKernel, dim3(static_cast<unsigned>(shape.rows)), dim3(kThreads), 0,
                stream, p.logits.ptr<const float>(), p.logits.stride(0),
                static_cast<int>(shape.cols),
                reinterpret_cast<const sampling::RowOptions*>(p.options.ptr<const int32_t>()),
                p.token_ids.ptr<int32_t>(), p.token_ids.stride(0), p.logprobs.ptr<float>(),
                p.logprobs.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
