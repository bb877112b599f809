// MoE block alignment and the routed experts.
//
// MoeExperts hands out work items, an expert's block of columns each, to the team as threads
// come free: in phase 1 an item computes its columns of one expert's gate and up projections
// (one grouped GEMM over the expert's rows for both, so that A is packed once per item) and
// applies SiLU·mul to them while they are hot in cache; after a barrier phase 2 does the same
// for the down projections, and after another each thread does the weighted combine for its
// slice of the hidden columns. An expert is cut into blocks in proportion to its rows, about
// kItemsPerThread items per thread over the call: few experts with few rows (decode) still
// spread their weights over every thread, many experts with many rows (a prompt) pack each
// row of A for wide blocks instead of for one thread's narrow slice, and an expert that most
// tokens chose does not hold up the team. Which thread runs an item does not change its
// results (a column's sums do not depend on the columns beside it).
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

int32_t I32(const TensorView& v, int64_t i) { return v.ptr<const int32_t>()[i * v.stride(0)]; }
int32_t* MutI32(const TensorView& v, int64_t i) { return v.ptr<int32_t>() + i * v.stride(0); }

// Sorted entries handled per grouped-GEMM call; two row lists of this length fit the index
// scratch.
constexpr int64_t kChunk = CpuContext::kIndexScratch / 2;

// Walks expert e's run of the aligned order in chunks of up to kChunk real (non-padding)
// entries: fn(m, tokens, positions) with tokens[i] the token of entry positions[i].
template <class Fn>
void ForEachChunk(const MoeExpertsParams& p, int64_t e, int64_t top_k, int64_t num_pairs,
                  int32_t* rows, Fn&& fn) {
  int32_t* tokens = rows;
  int32_t* positions = rows + kChunk;
  const int64_t end = I32(p.expert_offsets, e + 1);
  for (int64_t s = I32(p.expert_offsets, e); s < end;) {
    int64_t m = 0;
    for (; s < end && m < kChunk; ++s) {
      const int32_t pair = I32(p.sorted_ids, s);
      if (pair == num_pairs) continue;  // padding
      MLASERVE_CHECK(pair >= 0 && pair < num_pairs);
      tokens[m] = static_cast<int32_t>(pair / top_k);
      positions[m++] = static_cast<int32_t>(s);
    }
    if (m > 0) fn(m, tokens, positions);
  }
}

// Work items per thread that the experts' blocks aim at over one call (of 4, 8 and 16, 16 was
// the fastest on 16 Xeon cores; docs/performance.md).
constexpr int64_t kItemsPerThread = 16;

// first[e], e <= num_experts: the index of expert e's first item, where an expert of r aligned
// rows out of `total` is cut into ceil(r * threads * kItemsPerThread / total) blocks (at
// least one, at most one per panel of the `width` columns).
void PlanItems(const MoeExpertsParams& p, int64_t num_experts, int64_t total, int threads,
               int64_t width, int64_t panel, int32_t* first) {
  const int64_t units = (width + panel - 1) / panel;
  first[0] = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t rows = I32(p.expert_offsets, e + 1) - I32(p.expert_offsets, e);
    const int64_t blocks =
        rows == 0 ? 0
                  : std::clamp<int64_t>((rows * threads * kItemsPerThread + total - 1) / total, 1,
                                        units);
    first[e + 1] = static_cast<int32_t>(first[e] + blocks);
  }
}

// Runs fn(e, cols) for the items of `first` that this thread takes from `next`: cols is
// expert e's block of [0, width).
template <class Fn>
void TakeItems(std::atomic<int64_t>& next, const int32_t* first, int64_t num_experts,
               int64_t width, int64_t panel, Fn&& fn) {
  for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < first[num_experts];
       i = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t e = std::upper_bound(first, first + num_experts + 1, i) - first - 1;
    const int blocks = first[e + 1] - first[e];
    fn(e, SplitRange(width, blocks, static_cast<int>(i - first[e]), panel));
  }
}

// Runs `g` over a chunk whose row i belongs to token tokens[i] (ascending): every row by dot
// products where the build takes experts' rows so (CpuKernels::expert_rows_by_dot); else by
// size, or, on a batch-invariant backend, the decode tokens' rows by dot products and the rest
// packed. Either way a batch-invariant row's sum does not depend on its company.
void ChunkGemm(const CpuContext& ctx, int64_t decode_tokens, const int32_t* tokens, GemmArgs g,
               float* scratch) {
  if (ctx.k().expert_rows_by_dot && g.b_dtype == DType::kBF16) {
    g.path = GemmPath::kFixedDot;
    ctx.k().gemm(g, scratch);
    return;
  }
  if (!ctx.batch_invariant()) {
    ctx.k().gemm(g, scratch);
    return;
  }
  const int64_t m = g.m;
  int64_t d = 0;
  while (d < m && tokens[d] < decode_tokens) ++d;
  g.path = GemmPath::kFixedDot;
  g.m = d;
  if (d > 0) ctx.k().gemm(g, scratch);
  g.path = GemmPath::kPacked;
  g.m = m - d;
  g.a_rows += d;
  g.c_rows += d;
  if (d < m) ctx.k().gemm(g, scratch);
}

}  // namespace

void CpuMoeAlignBlockSize(const CpuContext& ctx, const MoeAlignParams& p) {
  CheckTensor(p.topk_ids, "MoeAlign.topk_ids", DType::kI32, {kAnyDim, kAnyDim});
  const int64_t top_k = p.topk_ids.size(1);
  const int64_t num_pairs = p.topk_ids.size(0) * top_k;
  const int num_experts = p.num_experts;
  const int64_t block = p.block_size;
  MLASERVE_CHECK(num_experts >= 1 && block >= 1);
  MLASERVE_CHECK(2 * (num_experts + 1) <= CpuContext::kIndexScratch);
  const int64_t len = num_pairs + num_experts * (block - 1);
  CheckTensor(p.sorted_ids, "MoeAlign.sorted_ids", DType::kI32, {len});
  CheckTensor(p.block_expert_ids, "MoeAlign.block_expert_ids", DType::kI32,
              {(len + block - 1) / block});
  CheckTensor(p.expert_offsets, "MoeAlign.expert_offsets", DType::kI32, {num_experts + 1});
  CheckTensor(p.num_tokens_post_pad, "MoeAlign.num_tokens_post_pad", DType::kI32, {1});

  // Counting sort on the calling thread: the work is a few passes over num_pairs integers. (A
  // region of one thread, so that the pool prefetches what the caller reads after it.)
  ctx.Parallel(1, [&](int, int) {
    int32_t* offsets = ctx.IndexScratch(0);       // [num_experts + 1]
    int32_t* cursor = offsets + num_experts + 1;  // [num_experts]
    for (int e = 0; e <= num_experts; ++e) offsets[e] = 0;
    const int32_t* ids = p.topk_ids.ptr<const int32_t>();
    auto expert_of = [&](int64_t pair) {
      const int32_t e = ids[pair / top_k * p.topk_ids.stride(0) + pair % top_k];
      MLASERVE_CHECK(e >= 0 && e < num_experts);
      return e;
    };
    for (int64_t pair = 0; pair < num_pairs; ++pair) ++offsets[expert_of(pair) + 1];
    for (int e = 0; e < num_experts; ++e) {
      offsets[e + 1] =
          offsets[e] + static_cast<int32_t>((offsets[e + 1] + block - 1) / block * block);
      cursor[e] = offsets[e];
    }
    // Visiting pairs in ascending order keeps each expert's run sorted by pair index.
    for (int64_t pair = 0; pair < num_pairs; ++pair) {
      *MutI32(p.sorted_ids, cursor[expert_of(pair)]++) = static_cast<int32_t>(pair);
    }
    for (int e = 0; e < num_experts; ++e) {
      for (int64_t r = cursor[e]; r < offsets[e + 1]; ++r) {
        *MutI32(p.sorted_ids, r) = static_cast<int32_t>(num_pairs);
      }
      for (int64_t b = offsets[e] / block; b < offsets[e + 1] / block; ++b) {
        *MutI32(p.block_expert_ids, b) = e;
      }
    }
    for (int e = 0; e <= num_experts; ++e) *MutI32(p.expert_offsets, e) = offsets[e];
    *MutI32(p.num_tokens_post_pad, 0) = offsets[num_experts];
  });
}

void CpuMoeExperts(const CpuContext& ctx, const MoeExpertsParams& p) {
  const MoeExpertsShape shape = CheckMoeExperts(p);
  const int64_t num_tokens = shape.num_tokens, hidden = shape.hidden;
  const int64_t num_experts = shape.num_experts, inter = shape.inter, top_k = shape.top_k;
  const int64_t num_pairs = shape.num_pairs;
  const int64_t total = shape.total;
  MLASERVE_CHECK(I32(p.expert_offsets, 0) == 0 && I32(p.expert_offsets, num_experts) == total);

  const CpuKernels& k = ctx.k();
  const int64_t w_elem = static_cast<int64_t>(DTypeSize(p.w13.dtype()));
  const int64_t w2_elem = static_cast<int64_t>(DTypeSize(p.w2.dtype()));
  const char* w13 = static_cast<const char*>(p.w13.data());
  const char* w2 = static_cast<const char*>(p.w2.data());
  float* gate_up = p.workspace_gate_up.ptr<float>();
  float* act = p.workspace_act.ptr<float>();
  float* down = p.workspace_down.ptr<float>();
  const int64_t gu_ld = p.workspace_gate_up.stride(0), act_ld = p.workspace_act.stride(0);
  const int64_t down_ld = p.workspace_down.stride(0);
  const int threads = ctx.ThreadsFor(num_pairs * 3 * inter * hidden);
  const int64_t panel = k.gemm_panel_cols;

  // The two phases' item plans, read by every thread.
  MLASERVE_CHECK(2 * (num_experts + 1) <= CpuContext::kOpScratchFloats);
  int32_t* first13 = reinterpret_cast<int32_t*>(ctx.OpScratch(0));
  int32_t* first2 = first13 + num_experts + 1;
  PlanItems(p, num_experts, total, threads, inter, panel, first13);
  PlanItems(p, num_experts, total, threads, hidden, panel, first2);
  std::atomic<int64_t> next13{0}, next2{0};

  ctx.Parallel(threads, [&](int t, int team) {
    int32_t* rows = ctx.IndexScratch(t);
    TakeItems(next13, first13, num_experts, inter, panel, [&](int64_t e, Range cols) {
      ForEachChunk(p, e, top_k, num_pairs, rows,
                   [&](int64_t m, const int32_t* tokens, const int32_t* positions) {
                     GemmArgs g;
                     g.a = p.x.ptr<const float>();
                     g.lda = p.x.stride(0);
                     g.a_rows = tokens;
                     g.b = w13 + e * 2 * inter * hidden * w_elem;
                     g.b_dtype = p.w13.dtype();
                     g.ldb = hidden;
                     g.c = gate_up;
                     g.ldc = gu_ld;
                     g.c_rows = positions;
                     g.m = m;
                     g.k = hidden;
                     g.a_bf16 = ctx.RoundsInputsFor(p.w13.dtype());
                     // The block of the gate and the same block of the up projection.
                     g.n_begin = cols.begin;
                     g.n_end = cols.end;
                     g.n_repeat = inter;
                     ChunkGemm(ctx, p.decode_tokens, tokens, g, ctx.GemmScratch(t));
                     for (int64_t i = 0; i < m; ++i) {
                       const float* gu = gate_up + positions[i] * gu_ld;
                       k.silu_mul(gu + cols.begin, gu + inter + cols.begin,
                                  act + positions[i] * act_ld + cols.begin, cols.end - cols.begin);
                     }
                   });
    });
    ctx.Barrier();
    TakeItems(next2, first2, num_experts, hidden, panel, [&](int64_t e, Range cols) {
      ForEachChunk(p, e, top_k, num_pairs, rows,
                   [&](int64_t m, const int32_t* tokens, const int32_t* positions) {
                     GemmArgs g;
                     g.a = act;
                     g.lda = act_ld;
                     g.a_rows = positions;
                     g.b = w2 + e * hidden * inter * w2_elem;
                     g.b_dtype = p.w2.dtype();
                     g.ldb = inter;
                     g.c = down;
                     g.ldc = down_ld;
                     g.c_rows = positions;
                     g.m = m;
                     g.k = inter;
                     g.a_bf16 = ctx.RoundsInputsFor(p.w2.dtype());
                     g.n_begin = cols.begin;
                     g.n_end = cols.end;
                     ChunkGemm(ctx, p.decode_tokens, tokens, g, ctx.GemmScratch(t));
                   });
    });
    ctx.Barrier();
    const Range hid = SplitRange(hidden, team, t, panel);
    if (hid.begin == hid.end) return;
    float* out = p.out.ptr<float>();
    const int64_t out_ld = p.out.stride(0);
    const int64_t width = hid.end - hid.begin;
    for (int64_t tok = 0; tok < num_tokens; ++tok) {
      for (int64_t c = hid.begin; c < hid.end; ++c) out[tok * out_ld + c] = 0.0f;
    }
    const float* weights = p.topk_weights.ptr<const float>();
    const int64_t weights_ld = p.topk_weights.stride(0);
    for (int64_t s = 0; s < total; ++s) {
      const int32_t pair = I32(p.sorted_ids, s);
      if (pair == num_pairs) continue;
      const int64_t tok = pair / top_k;
      k.axpy(out + tok * out_ld + hid.begin, down + s * down_ld + hid.begin, width,
             weights[tok * weights_ld + pair % top_k]);
    }
  });
}

}  // namespace mlaserve
