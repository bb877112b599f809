// MLA attention on the device: absorbed decode over the paged latent cache, prefill over
// decompressed keys and values, and the log-sum-exp merge of partial results (kernels/params.h
// MlaDecodeParams, MlaPrefillParams, MergeAttnParams; oracle: kernels/ref/ref_attention.cc).
//
// Decode and prefill share one scheme: one block of kThreads threads per (head, query row).
// Keys are visited in tiles of kThreads, one key per thread: each thread computes its key's
// score, the block reduces the tile's max and the running max is updated with the online
// softmax (running sum and the accumulator rescaled by exp(old max - new max)); then every thread
// adds the tile's weighted values into the output channels it owns (c ≡ threadIdx.x mod
// kThreads), held in dynamic shared memory (value_dim floats). Scores and sums are f32.
// Split-KV decode: with a plan (MlaDecodeParams::split_*, kernels/mla_split_plan.h) the grid is
// (head, g) with g < min(the plan's capacity, sequences + MlaDecodeWorkers), and block (h, g)
// takes plan items g, g + G, g + 2G, ... until the first unused slot (the plan's items come
// first): a balanced plan fits that grid one item a block, and a per-sequence plan, whose
// capacity is sequences x workers, launches no block per slot it leaves unused. For each item
// a block attends its position range and, when its sequence has several items, writes the
// normalised partial result and its log-sum-exp to the split workspace; MlaSplitCombineKernel
// (one block per (head, sequence)) then merges a sequence's items in order, weighted by
// exp(lse_i - max lse). Without a plan every sequence is one item.
// Nothing per step is read on the host: sequence lengths, block tables, the split plan and
// cu_seqlens are read by the kernels, so the launches can be captured into graphs and replayed.
// Scores are scalar f32 dot products (no tensor cores): the kernels are written for exactness
// first; docs/cuda.md gives what a tiled, tensor-core decode would change.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kThreads = 128;

// Online-softmax state of one block: running max and sum, acc[value_dim] in shared memory.
struct Softmax {
  float max = -INFINITY;
  float sum = 0.0f;
};

// Folds one tile of scores (one per thread; -inf for no key) into `state`: returns this thread's
// weight exp(score - new max) after rescaling acc by exp(old max - new max).
__device__ float FoldTile(float score, Softmax& state, float* acc, int value_dim) {
  const float tile_max = BlockMax(score);
  const float new_max = fmaxf(state.max, tile_max);
  const float alpha = state.max == -INFINITY ? 0.0f : __expf(state.max - new_max);
  const float p = score == -INFINITY ? 0.0f : __expf(score - new_max);
  state.sum = state.sum * alpha + BlockSum(p);
  state.max = new_max;
  for (int c = threadIdx.x; c < value_dim; c += kThreads) acc[c] *= alpha;
  return p;
}

// Where a decode block's work comes from and where its result goes.
struct DecodeSplit {
  const int32_t* items;    // [capacity, 3] (seq, begin, end), or null: item = sequence
  int capacity;            // rows of items
  const int32_t* offsets;  // [num_seqs + 1] items of each sequence
  float* out;              // [capacity, heads, rank] partial results
  int64_t out_s0, out_s1;
  float* lse;              // [capacity, heads]
  int64_t lse_s0;
};

// One block attends positions [begin, end) of sequence s for head h and writes the normalised
// result to dst[0 .. rank) and, for a partial (lse != nullptr), its log-sum-exp to *lse.
__device__ void DecodeItem(const float* q_latent, int64_t ql_s0, int64_t ql_s1, const float* q_pe,
                           int64_t qp_s0, int64_t qp_s1, const void* cache, bool cache_bf16,
                           int rank, int rope_dim, int block_size, const int32_t* block_tables,
                           int64_t bt_s0, float scale, int h, int s, int begin, int end, float* dst,
                           float* lse, float* acc, float* weight, int64_t* row) {
  const int t = threadIdx.x;
  const float* ql = q_latent + s * ql_s0 + h * ql_s1;
  const float* qp = q_pe + s * qp_s0 + h * qp_s1;
  const int64_t row_dim = rank + rope_dim;
  for (int c = t; c < rank; c += kThreads) acc[c] = 0.0f;
  Softmax state;
  for (int j0 = begin; j0 < end; j0 += kThreads) {
    const int j = j0 + t;
    float score = -INFINITY;
    if (j < end) {
      const int64_t r =
          (static_cast<int64_t>(block_tables[s * bt_s0 + j / block_size]) * block_size +
           j % block_size) *
          row_dim;
      float dot = 0.0f;
      for (int c = 0; c < rank; ++c) dot += ql[c] * LoadAsF32(cache, cache_bf16, r + c);
      for (int d = 0; d < rope_dim; ++d) dot += qp[d] * LoadAsF32(cache, cache_bf16, r + rank + d);
      score = scale * dot;
      row[t] = r;
    }
    weight[t] = FoldTile(score, state, acc, rank);
    __syncthreads();
    const int n = end - j0 < kThreads ? end - j0 : kThreads;
    for (int c = t; c < rank; c += kThreads) {
      float a = acc[c];
      for (int k = 0; k < n; ++k) a += weight[k] * LoadAsF32(cache, cache_bf16, row[k] + c);
      acc[c] = a;
    }
    __syncthreads();
  }
  for (int c = t; c < rank; c += kThreads) dst[c] = acc[c] / state.sum;
  if (lse != nullptr && t == 0) *lse = state.max + logf(state.sum);
}

__global__ void MlaDecodeKernel(const float* q_latent, int64_t ql_s0, int64_t ql_s1,
                                const float* q_pe, int64_t qp_s0, int64_t qp_s1, const void* cache,
                                bool cache_bf16, int rank, int rope_dim, int block_size,
                                const int32_t* block_tables, int64_t bt_s0, const int32_t* seq_lens,
                                int64_t sl_s0, float scale, float* out, int64_t o_s0, int64_t o_s1,
                                DecodeSplit split) {
  MLASERVE_DYNAMIC_SHARED(float, acc);  // [rank]
  MLASERVE_SHARED(float, weight, [kThreads]);
  MLASERVE_SHARED(int64_t, row, [kThreads]);
  const int h = blockIdx.x;
  if (split.items == nullptr) {
    const int s = blockIdx.y;
    DecodeItem(q_latent, ql_s0, ql_s1, q_pe, qp_s0, qp_s1, cache, cache_bf16, rank, rope_dim,
               block_size, block_tables, bt_s0, scale, h, s, 0, seq_lens[s * sl_s0],
               out + s * o_s0 + h * o_s1, nullptr, acc, weight, row);
    return;
  }
  for (int item = blockIdx.y; item < split.capacity; item += gridDim.y) {
    const int s = split.items[item * 3];
    if (s < 0) return;  // the first unused plan slot (uniform over the block)
    // A sequence of one item is written in place; the combine kernel merges the others.
    const bool alone = split.offsets[s + 1] - split.offsets[s] == 1;
    float* dst =
        alone ? out + s * o_s0 + h * o_s1 : split.out + item * split.out_s0 + h * split.out_s1;
    float* lse = alone ? nullptr : split.lse + item * split.lse_s0 + h;
    DecodeItem(q_latent, ql_s0, ql_s1, q_pe, qp_s0, qp_s1, cache, cache_bf16, rank, rope_dim,
               block_size, block_tables, bt_s0, scale, h, s, split.items[item * 3 + 1],
               split.items[item * 3 + 2], dst, lse, acc, weight, row);
  }
}

// Merges the partial results of every sequence with more than one plan item into out.
__global__ void MlaSplitCombineKernel(DecodeSplit split, int rank, float* out, int64_t o_s0,
                                      int64_t o_s1) {
  const int h = blockIdx.x, s = blockIdx.y;
  const int first = split.offsets[s], n = split.offsets[s + 1] - first;
  if (n <= 1) return;  // written by the decode kernel itself
  float max_lse = -INFINITY;
  for (int i = 0; i < n; ++i) max_lse = fmaxf(max_lse, split.lse[(first + i) * split.lse_s0 + h]);
  float total = 0.0f;
  for (int i = 0; i < n; ++i) total += __expf(split.lse[(first + i) * split.lse_s0 + h] - max_lse);
  for (int c = threadIdx.x; c < rank; c += blockDim.x) {
    float a = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float w = __expf(split.lse[(first + i) * split.lse_s0 + h] - max_lse);
      a += w * split.out[(first + i) * split.out_s0 + h * split.out_s1 + c];
    }
    out[s * o_s0 + h * o_s1 + c] = a / total;
  }
}

__global__ void MlaPrefillKernel(const float* q, int64_t q_s0, int64_t q_s1, const float* k_nope,
                                 int64_t kn_s0, int64_t kn_s1, const float* k_pe, int64_t kp_s0,
                                 const float* v, int64_t v_s0, int64_t v_s1, const int32_t* cu_q,
                                 int64_t cuq_s0, const int32_t* cu_kv, int64_t cukv_s0,
                                 int num_seqs, int nope_dim, int rope_dim, int v_dim, bool causal,
                                 float scale, float* out, int64_t o_s0, int64_t o_s1, float* lse,
                                 int64_t lse_s0, int64_t lse_s1) {
  MLASERVE_DYNAMIC_SHARED(float, acc);  // [v_dim]
  MLASERVE_SHARED(float, weight, [kThreads]);
  const int h = blockIdx.x, qi = blockIdx.y, t = threadIdx.x;
  int s = 0;
  while (s < num_seqs && cu_q[(s + 1) * cuq_s0] <= qi) ++s;
  if (s == num_seqs) return;  // a row past the last sequence: not part of the op
  const int q0 = cu_q[s * cuq_s0], len_q = cu_q[(s + 1) * cuq_s0] - q0;
  const int k0 = cu_kv[s * cukv_s0], len_kv = cu_kv[(s + 1) * cukv_s0] - k0;
  const int i = qi - q0;
  int visible = len_kv;
  if (causal) {
    visible = i + len_kv - len_q + 1;
    visible = visible < 0 ? 0 : (visible > len_kv ? len_kv : visible);
  }
  const float* qr = q + qi * q_s0 + h * q_s1;
  for (int c = t; c < v_dim; c += kThreads) acc[c] = 0.0f;
  Softmax state;
  for (int j0 = 0; j0 < visible; j0 += kThreads) {
    const int j = j0 + t;
    float score = -INFINITY;
    if (j < visible) {
      const float* kn = k_nope + (k0 + j) * kn_s0 + h * kn_s1;
      const float* kp = k_pe + (k0 + j) * kp_s0;
      float dot = 0.0f;
      for (int d = 0; d < nope_dim; ++d) dot += qr[d] * kn[d];
      for (int d = 0; d < rope_dim; ++d) dot += qr[nope_dim + d] * kp[d];
      score = scale * dot;
    }
    weight[t] = FoldTile(score, state, acc, v_dim);
    __syncthreads();
    const int n = visible - j0 < kThreads ? visible - j0 : kThreads;
    for (int c = t; c < v_dim; c += kThreads) {
      float a = acc[c];
      for (int k = 0; k < n; ++k) a += weight[k] * v[(k0 + j0 + k) * v_s0 + h * v_s1 + c];
      acc[c] = a;
    }
    __syncthreads();
  }
  for (int c = t; c < v_dim; c += kThreads) {
    out[qi * o_s0 + h * o_s1 + c] = visible > 0 ? acc[c] / state.sum : 0.0f;
  }
  if (lse != nullptr && t == 0) {
    lse[qi * lse_s0 + h * lse_s1] = visible > 0 ? state.max + logf(state.sum) : -INFINITY;
  }
}

__global__ void MergeAttnKernel(float* out, int64_t o_s0, int64_t o_s1, float* lse, int64_t l_s0,
                                int64_t l_s1, const float* suffix_out, int64_t so_s0, int64_t so_s1,
                                const float* suffix_lse, int64_t sl_s0, int64_t sl_s1, int dim) {
  const int h = blockIdx.x, tok = blockIdx.y;
  const float a = lse[tok * l_s0 + h * l_s1], b = suffix_lse[tok * sl_s0 + h * sl_s1];
  const float merged = a == -INFINITY   ? b
                       : b == -INFINITY ? a
                                        : fmaxf(a, b) + log1pf(__expf(-fabsf(a - b)));
  const float wa = a == -INFINITY ? 0.0f : __expf(a - merged);
  const float wb = b == -INFINITY ? 0.0f : __expf(b - merged);
  float* o = out + tok * o_s0 + h * o_s1;
  const float* so = suffix_out + tok * so_s0 + h * so_s1;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    o[c] = (wa == 0.0f ? 0.0f : wa * o[c]) + (wb == 0.0f ? 0.0f : wb * so[c]);
  }
  __syncthreads();  // every thread has read lse before thread 0 overwrites it
  if (threadIdx.x == 0) lse[tok * l_s0 + h * l_s1] = merged;
}

// Bytes of dynamic shared memory for `floats` accumulator channels (within the 48 KiB default).
size_t AccumulatorBytes(int64_t floats) {
  MLASERVE_CHECK_MSG(floats * 4 <= (int64_t{48} << 10), "MLA value dimension above 12288");
  return static_cast<size_t>(floats) * sizeof(float);
}

}  // namespace

cudaError_t LaunchMlaDecode(const MlaDecodeParams& p, const AttentionWorkspace& ws,
                            cudaStream_t stream) {
  const MlaDecodeShape shape = CheckMlaDecode(p);
  const int64_t num_seqs = shape.num_seqs, num_heads = shape.num_heads, rank = shape.rank;
  const int64_t rope_dim = shape.rope_dim;
  if (num_seqs == 0 || num_heads == 0) return cudaSuccess;
  const bool planned = !p.split_items.empty();
  DecodeSplit split{};
  if (planned) {
    split = {p.split_items.ptr<const int32_t>(),
             static_cast<int>(p.split_items.size(0)),
             p.split_offsets.ptr<const int32_t>(),
             p.split_out.ptr<float>(),
             p.split_out.stride(0),
             p.split_out.stride(1),
             p.split_lse.ptr<float>(),
             p.split_lse.stride(0)};
    MLASERVE_CHECK_MSG(p.split_offsets.stride(0) == 1 && p.split_lse.stride(1) == 1,
                       "MlaDecode: split_offsets and split_lse rows must be contiguous");
  }
  // A planned grid: as many rows as a balanced plan can fill, each taking every G-th item.
  const int64_t work_items =
      planned ? std::min(p.split_items.size(0), num_seqs + MlaDecodeWorkers(ws, num_heads))
              : num_seqs;
  const cudaError_t err = Launch(
      MlaDecodeKernel, dim3(static_cast<unsigned>(num_heads), static_cast<unsigned>(work_items)),
      dim3(kThreads), AccumulatorBytes(rank), stream, p.q_latent.ptr<const float>(),
      p.q_latent.stride(0), p.q_latent.stride(1), p.q_pe.ptr<const float>(), p.q_pe.stride(0),
      p.q_pe.stride(1), p.kv_cache.data(), p.kv_cache.dtype() == DType::kBF16,
      static_cast<int>(rank), static_cast<int>(rope_dim), static_cast<int>(p.kv_cache.size(1)),
      p.block_tables.ptr<const int32_t>(), p.block_tables.stride(0),
      p.seq_lens.ptr<const int32_t>(), p.seq_lens.stride(0), p.softmax_scale, p.out.ptr<float>(),
      p.out.stride(0), p.out.stride(1), split);
  if (err != cudaSuccess || !planned) return err;
  return Launch(MlaSplitCombineKernel,
                dim3(static_cast<unsigned>(num_heads), static_cast<unsigned>(num_seqs)),
                dim3(kThreads), 0, stream, split, static_cast<int>(rank), p.out.ptr<float>(),
                p.out.stride(0), p.out.stride(1));
}

cudaError_t LaunchMlaPrefill(const MlaPrefillParams& p, const AttentionWorkspace&, cublasHandle_t,
                             cudaStream_t stream) {
  const MlaPrefillShape shape = CheckMlaPrefill(p);
  const int64_t num_heads = shape.num_heads, nope_dim = shape.nope_dim;
  const int64_t rope_dim = shape.rope_dim, num_q = shape.num_q, v_dim = shape.v_dim;
  const bool has_lse = !p.lse.empty();
  const int64_t num_seqs = shape.num_seqs;
  if (num_q == 0 || num_heads == 0) return cudaSuccess;
  return Launch(
      MlaPrefillKernel, dim3(static_cast<unsigned>(num_heads), static_cast<unsigned>(num_q)),
      dim3(kThreads), AccumulatorBytes(v_dim), stream, p.q.ptr<const float>(), p.q.stride(0),
      p.q.stride(1), p.k_nope.ptr<const float>(), p.k_nope.stride(0), p.k_nope.stride(1),
      p.k_pe.ptr<const float>(), p.k_pe.stride(0), p.v.ptr<const float>(), p.v.stride(0),
      p.v.stride(1), p.cu_seqlens_q.ptr<const int32_t>(), p.cu_seqlens_q.stride(0),
      p.cu_seqlens_kv.ptr<const int32_t>(), p.cu_seqlens_kv.stride(0), static_cast<int>(num_seqs),
      static_cast<int>(nope_dim), static_cast<int>(rope_dim), static_cast<int>(v_dim), p.causal,
      p.softmax_scale, p.out.ptr<float>(), p.out.stride(0), p.out.stride(1),
      has_lse ? p.lse.ptr<float>() : nullptr, has_lse ? p.lse.stride(0) : int64_t{0},
      has_lse ? p.lse.stride(1) : int64_t{0});
}

cudaError_t LaunchMergeAttn(const MergeAttnParams& p, cudaStream_t stream) {
  const MergeAttnShape shape = CheckMergeAttn(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads, dim = shape.dim;
  if (num_tokens == 0 || num_heads == 0) return cudaSuccess;
  return Launch(
      MergeAttnKernel, dim3(static_cast<unsigned>(num_heads), static_cast<unsigned>(num_tokens)),
      dim3(kThreads), 0, stream, p.out.ptr<float>(), p.out.stride(0), p.out.stride(1),
      p.lse.ptr<float>(), p.lse.stride(0), p.lse.stride(1), p.suffix_out.ptr<const float>(),
      p.suffix_out.stride(0), p.suffix_out.stride(1), p.suffix_lse.ptr<const float>(),
      p.suffix_lse.stride(0), p.suffix_lse.stride(1), static_cast<int>(dim));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
