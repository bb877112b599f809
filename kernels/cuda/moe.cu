// MoE on the device: the router, moe_align_block_size and the routed experts (kernels/params.h
// MoeRouteParams, MoeAlignParams, MoeExpertsParams; oracle: kernels/ref/ref_moe.cc).
//
// - Router: one thread per token runs the oracle's selection serially (scores in double, as the
//   oracle computes them, rounded once to f32), so ids match it exactly, ties included.
// - Align: one launch of one block. Under kParallelAlignPairs pairs (decode steps), thread 0
//   counts pairs per expert, scans the padded counts and scatters pair ids in ascending pair
//   order, so each expert's run stays sorted; padding gets the sentinel. At 1 token and 256
//   experts this is one launch, a few hundred integer operations and no global atomics or
//   second pass: well under the ~23 µs of the published multi-kernel path, which pays several
//   launches and a grid-wide scan. From kParallelAlignPairs (prompts), 32 warps share the work
//   (MoeAlignParallelKernel) and produce the same bits.
// - Experts: a grouped GEMM of the project's own (ExpertGemmKernel): one CTA per (aligned block,
//   64-column tile), shared-memory tiles of 16 of the block's rows (gathered from x by token
//   for the gate/up projection) and of 64 of its expert's weight rows, so every weight element
//   a CTA loads serves 16 rows and one expert's weights are spread over n / 64 CTAs; SiLU·mul is a
//   row-wise launch between the two projections; a combine launch gives each token the
//   weighted sum of its top_k rows (found by scanning the aligned order), in k order, with no
//   float atomics. Padding rows are neither computed nor written, and no workspace is
//   zero-filled; every token's output row is written (zeros without pairs). The number of
//   aligned rows is read on the device (num_tokens_post_pad), so the launches replay from a
//   graph. CUDA cores only: no tensor-core (mma) path.
// - Experts of decode tokens: ExpertGemvKernel computes the same products with one warp per
//   (aligned block, weight row), streaming the row once per 4 selected rows of the block with
//   16-byte loads (gemv.cuh) instead of a CTA's 16-row tile that a lone decode row leaves mostly
//   idle. Batch invariant: the rows of decode tokens (MoeExpertsParams::decode_tokens) take it
//   and the other rows the tiled kernel, each kernel one order per element; otherwise calls
//   averaging at most 4 rows per expert take it for every row.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_ops.h"
#include "kernels/dtype.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kMaxExperts = 256;
constexpr int kMaxTopK = 16;
constexpr int kThreads = 128;
constexpr int kTile = 16;   // rows of an expert GEMM tile, and its threads per dimension
constexpr int kTileN = 64;  // its columns (four per thread)
constexpr int kTileK = 64;  // its depth per shared-memory refill
// Without batch invariance, calls averaging at most this many rows per expert take the GEMV.
constexpr int64_t kExpertGemvRowsPerExpert = 4;

struct RouteArgs {
  int num_experts, top_k, n_group, topk_group;
  bool sigmoid, grouped, noaux, normalize, scale;
  float routed_scaling_factor;
};

// Index of the largest value[i] with allowed[i], ties to the lower index; -1 if none.
__device__ int ArgMaxAllowed(const float* value, const bool* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (allowed[i] && (best < 0 || value[i] > value[best])) best = i;
  }
  return best;
}

__global__ void MoeRouteKernel(const float* logits, int64_t lg_s0, int64_t num_tokens,
                               const float* bias, int64_t bias_s0, RouteArgs a, int32_t* ids,
                               int64_t ids_s0, float* weights, int64_t w_s0) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= num_tokens) return;
  const float* row = logits + t * lg_s0;
  float scores[kMaxExperts], choice[kMaxExperts];
  bool allowed[kMaxExperts];
  const int n = a.num_experts;
  if (a.sigmoid) {
    for (int e = 0; e < n; ++e)
      scores[e] = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(row[e]))));
  } else {
    double max = -INFINITY, sum = 0.0;
    for (int e = 0; e < n; ++e) max = fmax(max, static_cast<double>(row[e]));
    for (int e = 0; e < n; ++e) sum += exp(static_cast<double>(row[e]) - max);
    for (int e = 0; e < n; ++e)
      scores[e] = static_cast<float>(exp(static_cast<double>(row[e]) - max) / sum);
  }
  for (int e = 0; e < n; ++e) {
    const double b = a.noaux ? static_cast<double>(bias[e * bias_s0]) : 0.0;
    choice[e] = static_cast<float>(scores[e] + b);
    allowed[e] = true;
  }
  if (a.grouped) {
    const int group_size = n / a.n_group;
    float group_score[kMaxExperts];
    bool group_open[kMaxExperts], group_kept[kMaxExperts];
    for (int g = 0; g < a.n_group; ++g) {
      // The group's best choice value, or (noaux_tc) the f32 sum of its two best.
      float first = -INFINITY, second = -INFINITY;
      for (int i = 0; i < group_size; ++i) {
        const float v = choice[g * group_size + i];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_score[g] = a.noaux ? first + second : first;
      group_open[g] = true;
      group_kept[g] = false;
    }
    for (int i = 0; i < a.topk_group; ++i) {
      const int g = ArgMaxAllowed(group_score, group_open, a.n_group);
      group_open[g] = false;
      group_kept[g] = true;
    }
    for (int e = 0; e < n; ++e) allowed[e] = group_kept[e / group_size];
  }
  int chosen[kMaxTopK];
  double weight_sum = 0.0;
  for (int k = 0; k < a.top_k; ++k) {
    chosen[k] = ArgMaxAllowed(choice, allowed, n);
    allowed[chosen[k]] = false;
    weight_sum += scores[chosen[k]];
  }
  for (int k = 0; k < a.top_k; ++k) {
    double w = scores[chosen[k]];
    if (a.normalize) w /= weight_sum + 1e-20;
    if (a.scale) w *= a.routed_scaling_factor;
    ids[t * ids_s0 + k] = chosen[k];
    weights[t * w_s0 + k] = static_cast<float>(w);
  }
}

// The tail of expert e's aligned run, once its pairs fill [begin, filled): padding sentinels up
// to its end, its blocks' expert id and its offset (both align kernels).
__device__ void FinishExpertRun(int e, int32_t begin, int32_t filled, int32_t end, int block,
                                int64_t num_pairs, int32_t* sorted, int64_t sorted_s0,
                                int32_t* block_expert, int64_t be_s0, int32_t* offsets_out,
                                int64_t off_s0) {
  for (int32_t r = filled; r < end; ++r) sorted[r * sorted_s0] = static_cast<int32_t>(num_pairs);
  for (int32_t b = begin / block; b < end / block; ++b) block_expert[b * be_s0] = e;
  offsets_out[e * off_s0] = begin;
}

__global__ void MoeAlignKernel(const int32_t* topk_ids, int64_t ids_s0, int top_k,
                               int64_t num_pairs, int num_experts, int block, int32_t* sorted,
                               int64_t sorted_s0, int32_t* block_expert, int64_t be_s0,
                               int32_t* offsets_out, int64_t off_s0, int32_t* post_pad) {
  if (threadIdx.x != 0) return;
  int32_t offsets[kMaxExperts + 1], cursor[kMaxExperts];
  for (int e = 0; e <= num_experts; ++e) offsets[e] = 0;
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    ++offsets[topk_ids[(pair / top_k) * ids_s0 + pair % top_k] + 1];
  }
  for (int e = 0; e < num_experts; ++e) {
    offsets[e + 1] = offsets[e] + (offsets[e + 1] + block - 1) / block * block;
    cursor[e] = offsets[e];
  }
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    const int e = topk_ids[(pair / top_k) * ids_s0 + pair % top_k];
    sorted[cursor[e]++ * sorted_s0] = static_cast<int32_t>(pair);
  }
  for (int e = 0; e < num_experts; ++e) {
    FinishExpertRun(e, offsets[e], cursor[e], offsets[e + 1], block, num_pairs, sorted, sorted_s0,
                    block_expert, be_s0, offsets_out, off_s0);
  }
  offsets_out[num_experts * off_s0] = offsets[num_experts];
  post_pad[0] = offsets[num_experts];
}

// The same result for many pairs, in parallel within one block of kAlignWarps warps. Warp w owns
// the contiguous pair range [w * per, (w + 1) * per). Pass 1: each warp counts its range per
// expert into base[w][e] (shared atomics). Pass 2: one thread per expert adds up its padded
// count, warp 0 scans them into offsets (shuffles), and one thread per expert turns the counts
// into each warp's first slot in the expert's run (warps in order) and fills the padding and
// block ids. Pass 3: each warp walks its range 32 pairs at a time in pair order; a
// lane's slot is its warp's cursor for its expert plus the number of lower lanes with the same
// expert (found by shuffles), and the expert's last lane advances the cursor. Pair order within
// each expert is kept, so the result is bit-identical to MoeAlignKernel's. Shared memory:
// kAlignWarps x kMaxExperts cursors and the offsets (33 KB); no global workspace, no atomics
// on global memory.
constexpr int kAlignWarps = 32;
static_assert(kMaxExperts % 32 == 0, "warp 0 scans kMaxExperts / 32 experts a lane");
// Pairs from which the parallel kernel is used. Below, on paper, one thread's serial pass (a few
// thousand integer operations at most) costs less than the parallel kernel's four block
// barriers and 1024-thread launch; not measured on hardware.
constexpr int64_t kParallelAlignPairs = 512;

__global__ void __launch_bounds__(32 * kAlignWarps)
    MoeAlignParallelKernel(const int32_t* topk_ids, int64_t ids_s0, int top_k, int64_t num_pairs,
                           int num_experts, int block, int32_t* sorted, int64_t sorted_s0,
                           int32_t* block_expert, int64_t be_s0, int32_t* offsets_out,
                           int64_t off_s0, int32_t* post_pad) {
  MLASERVE_SHARED(int32_t, base, [kAlignWarps][kMaxExperts]);
  MLASERVE_SHARED(int32_t, offsets, [kMaxExperts + 1]);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t per = (num_pairs + kAlignWarps - 1) / kAlignWarps;
  const int64_t begin = warp * per, end = begin + per < num_pairs ? begin + per : num_pairs;
  auto expert_of = [&](int64_t pair) { return topk_ids[(pair / top_k) * ids_s0 + pair % top_k]; };
  for (int e = lane; e < num_experts; e += 32) base[warp][e] = 0;
  __syncwarp();
  for (int64_t pair = begin + lane; pair < end; pair += 32)
    atomicAdd(&base[warp][expert_of(pair)], 1);
  __syncthreads();
  // Padded count per expert, then an inclusive scan by warp 0 (kExpertsPerLane a lane).
  for (int e = static_cast<int>(threadIdx.x); e < num_experts; e += blockDim.x) {
    int32_t count = 0;
    for (int w = 0; w < kAlignWarps; ++w) count += base[w][e];
    offsets[e + 1] = (count + block - 1) / block * block;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kExpertsPerLane = kMaxExperts / 32;
    int32_t running[kExpertsPerLane];
    int32_t sum = 0;
    for (int i = 0; i < kExpertsPerLane; ++i) {
      const int e = lane * kExpertsPerLane + i;
      sum += e < num_experts ? offsets[e + 1] : 0;
      running[i] = sum;
    }
    int32_t inclusive = sum;
    for (int d = 1; d < 32; d *= 2) {
      const int32_t lower = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += lower;
    }
    for (int i = 0; i < kExpertsPerLane; ++i) {
      const int e = lane * kExpertsPerLane + i;
      if (e < num_experts) offsets[e + 1] = inclusive - sum + running[i];
    }
    if (lane == 0) offsets[0] = 0;
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < num_experts; e += blockDim.x) {
    int32_t cursor = offsets[e];
    for (int w = 0; w < kAlignWarps; ++w) {
      const int32_t count = base[w][e];
      base[w][e] = cursor;
      cursor += count;
    }
    FinishExpertRun(e, offsets[e], cursor, offsets[e + 1], block, num_pairs, sorted, sorted_s0,
                    block_expert, be_s0, offsets_out, off_s0);
  }
  if (threadIdx.x == 0) {
    offsets_out[num_experts * off_s0] = offsets[num_experts];
    post_pad[0] = offsets[num_experts];
  }
  __syncthreads();
  for (int64_t chunk = begin; chunk < end; chunk += 32) {
    const int64_t pair = chunk + lane;
    const int e = pair < end ? expert_of(pair) : -1;
    int below = 0, above = 0;  // lanes with the same expert below and above this one
    for (int j = 0; j < 32; ++j) {
      const int other = __shfl_sync(0xffffffffu, e, j);
      if (other == e) {
        if (j < lane) ++below;
        if (j > lane) ++above;
      }
    }
    if (e >= 0) sorted[(base[warp][e] + below) * sorted_s0] = static_cast<int32_t>(pair);
    __syncwarp();
    if (e >= 0 && above == 0) base[warp][e] += below + 1;
    __syncwarp();
  }
}

// The aligned rows and what the expert kernels read of them.
struct ExpertRows {
  const int32_t* sorted;
  int64_t sorted_s0;
  const int32_t* block_expert;
  int64_t be_s0;
  const int32_t* post_pad;
  int block;
  int64_t num_pairs;
  int top_k;
};

__device__ float Input(float v, bool round) {
  return round ? __bfloat162float(__float2bfloat16(v)) : v;
}

// One expert GEMM over the aligned rows: out[r, n] = sum_k in(r)[k] * w[e(r)][n][k] for every
// aligned row r that is not padding, where e(r) is its block's expert. in(r) is row
// token(sorted[r]) of `in` when gather_tokens (the gate/up projection reads x), else row r (the
// down projection reads the activations). Grid: (aligned blocks, ceil(n / kTileN)); block:
// kTile x kTile threads, thread (x, y) owning out[r0 + y, n0 + x + kTile j] (j < 4) for each
// kTile-row slice r0 of its aligned block. Shared memory: a kTile x (kTileK + 1) f32 tile of
// the rows and a kTileN x (kTileK + 1) tile of the weights (20.8 KB; the pad column keeps the
// column reads conflict-free), refilled per kTileK-wide k step between two barriers. Each
// weight element a CTA loads serves kTile rows, and one expert's weights are spread over
// ceil(n / kTileN) CTAs, so a single decode token still spreads over the device. Sums run in
// increasing k with fmaf whatever the row count (batch invariant).
struct ExpertGemm {
  const float* in;
  int64_t in_s0;
  bool gather_tokens;
  const void* w;  // [experts, n, k]
  bool w_bf16;
  bool round_in;  // bf16 activations: round each input element to bf16
  int64_t n, k;
  float* out;
  int64_t out_s0;
  // Rows whose token (pair / top_k) lies outside [min_token, max_token) are left to the other
  // kernel: neither computed nor written here (set per launch by LaunchExpertProjection).
  int64_t min_token = 0, max_token = 0;
};

// Whether aligned row r is a pair (not padding) whose token this launch computes.
__device__ inline bool RowSelected(const ExpertRows& rows, const ExpertGemm& g, int64_t r,
                                   int32_t* pair_out) {
  const int32_t pair = rows.sorted[r * rows.sorted_s0];
  *pair_out = pair;
  if (pair == rows.num_pairs) return false;
  const int64_t token = pair / rows.top_k;
  return token >= g.min_token && token < g.max_token;
}

__global__ void ExpertGemmKernel(ExpertRows rows, ExpertGemm g) {
  MLASERVE_SHARED(float, a_tile, [kTile][kTileK + 1]);
  MLASERVE_SHARED(float, b_tile, [kTileN][kTileK + 1]);
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows.block;
  if (first >= rows.post_pad[0]) return;  // the whole CTA: past the aligned rows
  const int64_t e = rows.block_expert[blockIdx.x * rows.be_s0];
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  constexpr int kCols = kTileN / kTile;  // output columns per thread: col0 + x + kTile j
  for (int64_t r0 = first; r0 < first + rows.block; r0 += kTile) {
    // Thread (x, y) loads and owns row r0 + y; it loads columns x + kTile q of the tiles.
    const int64_t r = r0 + ty;
    int32_t pair = static_cast<int32_t>(rows.num_pairs);
    const bool live = r < first + rows.block && RowSelected(rows, g, r, &pair);
    const float* in_row =
        g.in + (live ? (g.gather_tokens ? pair / rows.top_k : r) : int64_t{0}) * g.in_s0;
    float acc[kCols] = {};
    for (int64_t k0 = 0; k0 < g.k; k0 += kTileK) {
      for (int q = tx; q < kTileK; q += kTile) {
        const int64_t l = k0 + q;
        a_tile[ty][q] = live && l < g.k ? Input(in_row[l], g.round_in) : 0.0f;
        for (int j = ty; j < kTileN; j += kTile) {
          const bool in = col0 + j < g.n && l < g.k;
          b_tile[j][q] = in ? LoadAsF32(g.w, g.w_bf16, (e * g.n + col0 + j) * g.k + l) : 0.0f;
        }
      }
      __syncthreads();
      // Padding rows (most of a decode token's block) skip the products: their warps idle.
      if (live) {
        for (int kk = 0; kk < kTileK; ++kk) {
          const float a = a_tile[ty][kk];
          for (int j = 0; j < kCols; ++j) acc[j] = fmaf(a, b_tile[tx + kTile * j][kk], acc[j]);
        }
      }
      __syncthreads();
    }
    if (!live) continue;
    for (int j = 0; j < kCols; ++j) {
      const int64_t col = col0 + tx + kTile * j;
      if (col < g.n) g.out[r * g.out_s0 + col] = acc[j];
    }
  }
}

// The same products as ExpertGemmKernel for the few rows of decode tokens, by WarpDotRows
// (gemv.cuh: each weight row streamed once per 4 selected rows of its block, by one warp, with
// 16-byte loads; its own fixed order per element). Grid: (aligned blocks, ceil(n / 4)); block:
// 4 warps, warp w owning column blockIdx.y * 4 + w of every selected row of the block.
template <bool kFull>
__global__ void __launch_bounds__(32 * kGemvWarps) ExpertGemvKernel(ExpertRows rows, ExpertGemm g) {
  constexpr int kRows = 4;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows.block;
  if (first >= rows.post_pad[0]) return;  // the whole CTA: past the aligned rows
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kGemvWarps + threadIdx.x / 32;
  if (col >= g.n) return;  // the whole warp leaves together
  const int64_t e = rows.block_expert[blockIdx.x * rows.be_s0];
  const void* w_row = GemvRow(g.w, g.w_bf16, (e * g.n + col) * g.k);
  const int64_t end = first + rows.block;
  int64_t r = first;
  while (true) {
    // The next kRows selected rows of the block (the same on every lane).
    const float* a_rows[kRows];
    int64_t out_rows[kRows];
    int count = 0;
    for (int c = 0; c < kRows; ++c) {
      int32_t pair = 0;
      while (r < end && !RowSelected(rows, g, r, &pair)) ++r;
      a_rows[c] = g.in;
      out_rows[c] = 0;
      if (r < end) {
        a_rows[c] = g.in + (g.gather_tokens ? pair / rows.top_k : r) * g.in_s0;
        out_rows[c] = r++;
        count = c + 1;
      }
    }
    if (count == 0) return;
    float acc[kRows];
    WarpDotRows<kFull, kRows>(w_row, g.w_bf16, a_rows, g.round_in, count, g.k, acc);
    if (threadIdx.x % 32 != 0) continue;
    for (int c = 0; c < kRows; ++c) {
      if (c < count) g.out[out_rows[c] * g.out_s0 + col] = acc[c];
    }
  }
}

// act[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i] for every aligned row r that is not
// padding. Grid: aligned rows; block: kThreads threads striding over i.
__global__ void SiluMulRowsKernel(ExpertRows rows, const float* gate_up, int64_t gu_s0,
                                  int64_t inter, float* act, int64_t act_s0) {
  const int64_t r = blockIdx.x;
  if (r >= rows.post_pad[0] || rows.sorted[r * rows.sorted_s0] == rows.num_pairs) return;
  for (int64_t i = threadIdx.x; i < inter; i += blockDim.x) {
    const float g = gate_up[r * gu_s0 + i];
    act[r * act_s0 + i] = g / (1.0f + __expf(-g)) * gate_up[r * gu_s0 + inter + i];
  }
}

__global__ void CombineKernel(ExpertRows rows, const float* weights, int64_t w_s0,
                              const float* down, int64_t down_s0, int64_t hidden, float* out,
                              int64_t out_s0) {
  MLASERVE_SHARED(int32_t, position, [kMaxTopK]);
  const int64_t t = blockIdx.x;
  if (static_cast<int>(threadIdx.x) < rows.top_k) position[threadIdx.x] = -1;
  __syncthreads();
  const int32_t total = rows.post_pad[0];
  for (int32_t r = threadIdx.x; r < total; r += blockDim.x) {
    const int32_t pair = rows.sorted[r * rows.sorted_s0];
    if (pair != rows.num_pairs && pair / rows.top_k == t) position[pair % rows.top_k] = r;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float sum = 0.0f;
    for (int k = 0; k < rows.top_k; ++k) {
      if (position[k] >= 0) sum += weights[t * w_s0 + k] * down[position[k] * down_s0 + c];
    }
    out[t * out_s0 + c] = sum;
  }
}

// One expert projection: tokens [0, gemv_tokens) through ExpertGemvKernel, the rest through
// ExpertGemmKernel.
cudaError_t LaunchExpertProjection(const ExpertRows& rows, ExpertGemm g, int64_t gemv_tokens,
                                   int64_t num_tokens, unsigned aligned_blocks,
                                   cudaStream_t stream) {
  if (gemv_tokens > 0) {
    g.min_token = 0;
    g.max_token = gemv_tokens;
    const dim3 grid(aligned_blocks, static_cast<unsigned>((g.n + kGemvWarps - 1) / kGemvWarps));
    // Weight rows are k apart: whole groups when k is (GemvFullGroups checks it).
    const bool full = GemvFullGroups(g.k, g.w, {}) &&
                      GemvFullGroups(g.k, g.in, {g.in_s0 * static_cast<int64_t>(sizeof(float))});
    const cudaError_t e =
        full ? Launch(ExpertGemvKernel<true>, grid, dim3(32 * kGemvWarps), 0, stream, rows, g)
             : Launch(ExpertGemvKernel<false>, grid, dim3(32 * kGemvWarps), 0, stream, rows, g);
    if (e != cudaSuccess) return e;
  }
  if (gemv_tokens >= num_tokens) return cudaSuccess;
  g.min_token = gemv_tokens;
  g.max_token = num_tokens;
  return Launch(ExpertGemmKernel, dim3(aligned_blocks, static_cast<unsigned>((g.n + kTileN - 1) / kTileN)),
                dim3(kTile, kTile), 0, stream, rows, g);
}

}  // namespace

cudaError_t LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream) {
  CheckTensor(p.logits, "MoeRoute.logits", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.logits.size(0);
  const int num_experts = static_cast<int>(p.logits.size(1));
  MLASERVE_CHECK(num_experts <= kMaxExperts && p.top_k >= 1 && p.top_k <= kMaxTopK &&
                 p.top_k <= num_experts);
  CheckTensor(p.topk_ids, "MoeRoute.topk_ids", DType::kI32, {num_tokens, p.top_k});
  CheckTensor(p.topk_weights, "MoeRoute.topk_weights", DType::kF32, {num_tokens, p.top_k});
  RouteArgs a{};
  a.num_experts = num_experts;
  a.top_k = p.top_k;
  a.grouped = p.method != MoeTopkMethod::kGreedy;
  a.noaux = p.method == MoeTopkMethod::kNoauxTc;
  a.n_group = a.grouped ? p.n_group : 1;
  a.topk_group = a.grouped ? p.topk_group : 1;
  if (a.grouped) {
    MLASERVE_CHECK(p.n_group >= 1 && num_experts % p.n_group == 0);
    MLASERVE_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group);
    MLASERVE_CHECK(p.top_k <= p.topk_group * (num_experts / p.n_group));
  }
  if (a.noaux) {
    MLASERVE_CHECK(num_experts / p.n_group >= 2);
    CheckTensor(p.correction_bias, "MoeRoute.correction_bias", DType::kF32, {num_experts});
  }
  a.sigmoid = p.scoring == MoeScoring::kSigmoid;
  a.normalize = p.top_k > 1 && p.norm_topk_prob;
  a.scale = p.scale_always || !a.normalize;
  a.routed_scaling_factor = p.routed_scaling_factor;
  if (num_tokens == 0) return cudaSuccess;
  return Launch(MoeRouteKernel, dim3(GridFor(num_tokens, 32)), dim3(32), 0, stream,
                p.logits.ptr<const float>(), p.logits.stride(0), num_tokens,
                a.noaux ? p.correction_bias.ptr<const float>() : nullptr,
                a.noaux ? p.correction_bias.stride(0) : int64_t{0}, a, p.topk_ids.ptr<int32_t>(),
                p.topk_ids.stride(0), p.topk_weights.ptr<float>(), p.topk_weights.stride(0));
}

cudaError_t LaunchMoeAlignBlockSize(const MoeAlignParams& p, cudaStream_t stream) {
  CheckTensor(p.topk_ids, "MoeAlign.topk_ids", DType::kI32, {kAnyDim, kAnyDim});
  const int top_k = static_cast<int>(p.topk_ids.size(1));
  const int64_t num_pairs = p.topk_ids.size(0) * top_k;
  const int num_experts = p.num_experts;
  const int64_t block = p.block_size;
  MLASERVE_CHECK(num_experts >= 1 && num_experts <= kMaxExperts && block >= 1);
  const int64_t len = num_pairs + num_experts * (block - 1);
  CheckTensor(p.sorted_ids, "MoeAlign.sorted_ids", DType::kI32, {len});
  CheckTensor(p.block_expert_ids, "MoeAlign.block_expert_ids", DType::kI32,
              {(len + block - 1) / block});
  CheckTensor(p.expert_offsets, "MoeAlign.expert_offsets", DType::kI32, {num_experts + 1});
  CheckTensor(p.num_tokens_post_pad, "MoeAlign.num_tokens_post_pad", DType::kI32, {1});
  if (num_pairs >= kParallelAlignPairs) {
    return Launch(MoeAlignParallelKernel, dim3(1), dim3(32 * kAlignWarps), 0, stream,
                  p.topk_ids.ptr<const int32_t>(), p.topk_ids.stride(0), top_k, num_pairs,
                  num_experts, static_cast<int>(block), p.sorted_ids.ptr<int32_t>(),
                  p.sorted_ids.stride(0), p.block_expert_ids.ptr<int32_t>(),
                  p.block_expert_ids.stride(0), p.expert_offsets.ptr<int32_t>(),
                  p.expert_offsets.stride(0), p.num_tokens_post_pad.ptr<int32_t>());
  }
  return Launch(MoeAlignKernel, dim3(1), dim3(32), 0, stream, p.topk_ids.ptr<const int32_t>(),
                p.topk_ids.stride(0), top_k, num_pairs, num_experts, static_cast<int>(block),
                p.sorted_ids.ptr<int32_t>(), p.sorted_ids.stride(0),
                p.block_expert_ids.ptr<int32_t>(), p.block_expert_ids.stride(0),
                p.expert_offsets.ptr<int32_t>(), p.expert_offsets.stride(0),
                p.num_tokens_post_pad.ptr<int32_t>());
}

cudaError_t LaunchMoeExperts(const MoeExpertsParams& p, DType activation_dtype,
                             bool batch_invariant, cublasHandle_t, cudaStream_t stream) {
  CheckTensor(p.x, "MoeExperts.x", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.x.size(0), hidden = p.x.size(1);
  CheckTensor(p.w13, "MoeExperts.w13", kWeightDTypes, {kAnyDim, kAnyDim, hidden});
  CheckContiguous(p.w13, "MoeExperts.w13");
  const int64_t num_experts = p.w13.size(0), inter = p.w13.size(1) / 2;
  MLASERVE_CHECK(p.w13.size(1) == 2 * inter);
  CheckTensor(p.w2, "MoeExperts.w2", kWeightDTypes, {num_experts, hidden, inter});
  CheckContiguous(p.w2, "MoeExperts.w2");
  CheckTensor(p.topk_weights, "MoeExperts.topk_weights", DType::kF32, {num_tokens, kAnyDim});
  const int top_k = static_cast<int>(p.topk_weights.size(1));
  MLASERVE_CHECK(top_k >= 1 && top_k <= kMaxTopK && p.block_size >= 1);
  const int64_t num_pairs = num_tokens * top_k;
  const int64_t len = num_pairs + num_experts * (p.block_size - 1);
  CheckTensor(p.sorted_ids, "MoeExperts.sorted_ids", DType::kI32, {len});
  CheckTensor(p.block_expert_ids, "MoeExperts.block_expert_ids", DType::kI32,
              {(len + p.block_size - 1) / p.block_size});
  CheckTensor(p.num_tokens_post_pad, "MoeExperts.num_tokens_post_pad", DType::kI32, {1});
  CheckTensor(p.workspace_gate_up, "MoeExperts.workspace_gate_up", DType::kF32, {len, 2 * inter});
  CheckTensor(p.workspace_act, "MoeExperts.workspace_act", DType::kF32, {len, inter});
  CheckTensor(p.workspace_down, "MoeExperts.workspace_down", DType::kF32, {len, hidden});
  CheckTensor(p.out, "MoeExperts.out", DType::kF32, {num_tokens, hidden});
  if (num_tokens == 0) return cudaSuccess;
  const ExpertRows rows{p.sorted_ids.ptr<const int32_t>(),
                        p.sorted_ids.stride(0),
                        p.block_expert_ids.ptr<const int32_t>(),
                        p.block_expert_ids.stride(0),
                        p.num_tokens_post_pad.ptr<const int32_t>(),
                        p.block_size,
                        num_pairs,
                        top_k};
  // Every aligned block below num_tokens_post_pad holds at least one pair, so at most num_pairs
  // blocks (and num_pairs * block_size rows) do work: the grids stop there rather than at the
  // layout's worst case (61 blocks for V2-Lite's one decode token, of which 6 can work).
  const unsigned aligned_blocks = static_cast<unsigned>(
      std::min((len + p.block_size - 1) / p.block_size, num_pairs));
  const unsigned aligned_rows = static_cast<unsigned>(std::min(len, num_pairs * p.block_size));
  // Tokens that take the GEMV kernel: the decode tokens when batch invariant (one order for
  // them whatever shares the step); otherwise every token of a call whose experts get few rows
  // each on average.
  const int64_t gemv_tokens =
      batch_invariant ? std::clamp<int64_t>(p.decode_tokens, 0, num_tokens)
      : num_pairs <= kExpertGemvRowsPerExpert * num_experts ? num_tokens
                                                                     : 0;
  const ExpertGemm gate_up{p.x.ptr<const float>(),
                           p.x.stride(0),
                           /*gather_tokens=*/true,
                           p.w13.data(),
                           p.w13.dtype() == DType::kBF16,
                           RoundsGemmInput(activation_dtype, p.w13.dtype()),
                           2 * inter,
                           hidden,
                           p.workspace_gate_up.ptr<float>(),
                           p.workspace_gate_up.stride(0)};
  cudaError_t e =
      LaunchExpertProjection(rows, gate_up, gemv_tokens, num_tokens, aligned_blocks, stream);
  if (e != cudaSuccess) return e;
  e = Launch(SiluMulRowsKernel, dim3(aligned_rows), dim3(kThreads), 0, stream, rows,
             p.workspace_gate_up.ptr<const float>(), p.workspace_gate_up.stride(0), inter,
             p.workspace_act.ptr<float>(), p.workspace_act.stride(0));
  if (e != cudaSuccess) return e;
  const ExpertGemm down{p.workspace_act.ptr<const float>(),
                        p.workspace_act.stride(0),
                        /*gather_tokens=*/false,
                        p.w2.data(),
                        p.w2.dtype() == DType::kBF16,
                        RoundsGemmInput(activation_dtype, p.w2.dtype()),
                        hidden,
                        inter,
                        p.workspace_down.ptr<float>(),
                        p.workspace_down.stride(0)};
  e = LaunchExpertProjection(rows, down, gemv_tokens, num_tokens, aligned_blocks, stream);
  if (e != cudaSuccess) return e;
  return Launch(CombineKernel, dim3(static_cast<unsigned>(num_tokens)), dim3(kThreads), 0, stream,
                rows, p.topk_weights.ptr<const float>(), p.topk_weights.stride(0),
                p.workspace_down.ptr<const float>(), p.workspace_down.stride(0), hidden,
                p.out.ptr<float>(), p.out.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
