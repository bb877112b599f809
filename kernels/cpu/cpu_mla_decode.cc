// Absorbed MLA decode over the paged latent cache. Every head of a sequence reads the same cache
// rows, so heads are processed together: scores of a tile of rows for a group of heads are one
// GEMM (heads x rows), and the value product another (heads x rank). With at least as many
// sequences as threads each thread takes whole sequences; with fewer, every sequence's
// positions are split over the team and the partial results merged by their log-sum-exp
// (unless the backend is batch-invariant: then sequences are never split, and their heads are
// cut into one group per thread instead).
// Either way a call synchronises the team once per parallel region and nowhere else.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_context.h"
#include "kernels/mla_split_plan.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kRowTile = 64;  // cache rows per score tile

struct DecodeShape {
  int64_t num_heads, rank, rope_dim, row_dim, block_size, num_blocks;
  int64_t head_group;  // heads per pass, bounded by the per-thread scratch
};

// Per-thread state of one pass: heads [h0, h0 + hg) of one sequence over a position range.
struct Partial {
  float* q;        // [hg, row_dim], pre-scaled by softmax_scale
  float* scores;   // [hg, kRowTile]
  float* acc;      // [hg, rank], unnormalised Σ p · c
  float* row_max;  // [hg]
  float* row_sum;  // [hg]

  Partial(float* scratch, const DecodeShape& d)
      : q(scratch),
        scores(q + d.head_group * d.row_dim),
        acc(scores + d.head_group * kRowTile),
        row_max(acc + d.head_group * d.rank),
        row_sum(row_max + d.head_group) {}
};

int64_t PartialFloats(int64_t heads, int64_t rank, int64_t row_dim) {
  return heads * (row_dim + kRowTile + rank + 2);
}

void Attend(const CpuContext& ctx, int t, const MlaDecodeParams& p, const DecodeShape& d, int64_t s,
            int64_t h0, int64_t hg, int64_t pos_begin, int64_t pos_end, const Partial& w) {
  const CpuKernels& k = ctx.k();
  for (int64_t h = 0; h < hg; ++h) {
    const float* ql =
        p.q_latent.ptr<const float>() + s * p.q_latent.stride(0) + (h0 + h) * p.q_latent.stride(1);
    const float* qp =
        p.q_pe.ptr<const float>() + s * p.q_pe.stride(0) + (h0 + h) * p.q_pe.stride(1);
    float* dst = w.q + h * d.row_dim;
    for (int64_t c = 0; c < d.rank; ++c) dst[c] = ql[c] * p.softmax_scale;
    for (int64_t c = 0; c < d.rope_dim; ++c) dst[d.rank + c] = qp[c] * p.softmax_scale;
    w.row_max[h] = kNegInf;
    w.row_sum[h] = 0.0f;
    for (int64_t c = 0; c < d.rank; ++c) w.acc[h * d.rank + c] = 0.0f;
  }
  const int32_t* table = p.block_tables.ptr<const int32_t>() + s * p.block_tables.stride(0);
  const int64_t elem = static_cast<int64_t>(DTypeSize(p.kv_cache.dtype()));
  for (int64_t pos = pos_begin; pos < pos_end;) {
    const int64_t slot = pos / d.block_size, offset = pos % d.block_size;
    MLASERVE_CHECK(slot < p.block_tables.size(1));
    const int32_t block = table[slot * p.block_tables.stride(1)];
    MLASERVE_CHECK(block >= 0 && block < d.num_blocks);
    int64_t rows = d.block_size - offset;
    if (rows > pos_end - pos) rows = pos_end - pos;
    if (rows > kRowTile) rows = kRowTile;
    const char* cache = static_cast<const char*>(p.kv_cache.data()) +
                        (block * d.block_size + offset) * d.row_dim * elem;
    GemmArgs g;
    g.a = w.q;
    g.lda = d.row_dim;
    g.b = cache;
    g.b_dtype = p.kv_cache.dtype();
    g.ldb = d.row_dim;
    g.c = w.scores;
    g.ldc = kRowTile;
    g.m = hg;
    g.k = d.row_dim;
    g.n_end = rows;
    k.gemm(g, ctx.GemmScratch(t));
    for (int64_t h = 0; h < hg; ++h) {
      float* srow = w.scores + h * kRowTile;
      const float tile_max = k.max(srow, rows);
      const float new_max = tile_max > w.row_max[h] ? tile_max : w.row_max[h];
      if (new_max != w.row_max[h] && w.row_max[h] != kNegInf) {
        const float alpha = std::exp(w.row_max[h] - new_max);
        k.scale(w.acc + h * d.rank, d.rank, alpha);
        w.row_sum[h] *= alpha;
      }
      w.row_max[h] = new_max;
      w.row_sum[h] += k.exp_sum(srow, rows, new_max);
    }
    GemmNnArgs pv;
    pv.a = w.scores;
    pv.lda = kRowTile;
    pv.b = cache;
    pv.b_dtype = p.kv_cache.dtype();
    pv.ldb = d.row_dim;
    pv.c = w.acc;
    pv.ldc = d.rank;
    pv.m = hg;
    pv.n = d.rank;
    pv.k = rows;
    k.gemm_nn(pv);
    pos += rows;
  }
}

float* OutRow(const MlaDecodeParams& p, int64_t s, int64_t h) {
  return p.out.ptr<float>() + s * p.out.stride(0) + h * p.out.stride(1);
}

}  // namespace

void CpuMlaDecode(const CpuContext& ctx, const MlaDecodeParams& p) {
  const MlaDecodeShape shape = CheckMlaDecode(p);
  const int64_t num_seqs = shape.num_seqs, num_heads = shape.num_heads, rank = shape.rank;
  const int64_t rope_dim = shape.rope_dim;
  if (num_seqs == 0 || num_heads == 0) return;

  DecodeShape d{num_heads,          rank, rope_dim, rank + rope_dim, p.kv_cache.size(1),
                p.kv_cache.size(0), 0};
  d.head_group = CpuContext::kOpScratchFloats / PartialFloats(1, rank, d.row_dim);
  MLASERVE_CHECK_MSG(d.head_group >= 1, "MlaDecode: latent too wide for the CPU scratch");
  if (d.head_group > num_heads) d.head_group = num_heads;
  if (ctx.batch_invariant()) {
    // Whole sequences only (below), so the heads are cut into one group per team member: a
    // lone sequence still occupies every thread. The groups depend on the team's size alone,
    // never on the step, so each head's arithmetic stays the same whatever shares the step.
    const int64_t per_thread = (num_heads + ctx.num_threads() - 1) / ctx.num_threads();
    if (per_thread < d.head_group) d.head_group = per_thread;
  }
  const int64_t groups = (num_heads + d.head_group - 1) / d.head_group;
  auto seq_len = [&](int64_t s) {
    const int32_t len = p.seq_lens.ptr<const int32_t>()[s * p.seq_lens.stride(0)];
    MLASERVE_CHECK(len >= 1);
    return static_cast<int64_t>(len);
  };
  int64_t work = 0;
  for (int64_t s = 0; s < num_seqs; ++s) work += seq_len(s);
  const int threads = ctx.ThreadsFor(work * num_heads * (d.row_dim + rank));

  if (num_seqs >= threads || ctx.batch_invariant()) {
    // Whole (sequence, head group) items per thread, normalised in place: the split below
    // would make a sequence's rounding depend on how many others share the step.
    // Items are claimed one at a time: sequence lengths differ.
    std::atomic<int64_t> next_item{0};
    ctx.Parallel(threads, [&](int t, int) {
      const Partial mine(ctx.OpScratch(t), d);
      for (int64_t item = next_item.fetch_add(1, std::memory_order_relaxed);
           item < num_seqs * groups; item = next_item.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t s = item / groups, h0 = item % groups * d.head_group;
        const int64_t hg = num_heads - h0 < d.head_group ? num_heads - h0 : d.head_group;
        Attend(ctx, t, p, d, s, h0, hg, 0, seq_len(s), mine);
        for (int64_t h = 0; h < hg; ++h) {
          float* out = OutRow(p, s, h0 + h);
          const float inv = 1.0f / mine.row_sum[h];
          for (int64_t c = 0; c < rank; ++c) out[c] = mine.acc[h * rank + c] * inv;
        }
      }
    });
    return;
  }
  // Fewer sequences than threads: the positions of each (sequence, head group) are split over
  // the team, block-aligned as the split-KV plan cuts them (kernels/mla_split_plan.h), and the
  // calling thread merges the partial results after the region's one barrier.
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t h0 = 0; h0 < num_heads; h0 += d.head_group) {
      const int64_t hg = num_heads - h0 < d.head_group ? num_heads - h0 : d.head_group;
      ctx.Parallel(threads, [&](int t, int team) {
        const MlaPositionRange pos = MlaSplitRange(seq_len(s), team, t, d.block_size);
        Attend(ctx, t, p, d, s, h0, hg, pos.begin, pos.end, Partial(ctx.OpScratch(t), d));
      });
      for (int64_t h = 0; h < hg; ++h) {
        float global_max = kNegInf;
        for (int u = 0; u < threads; ++u) {
          const float m = Partial(ctx.OpScratch(u), d).row_max[h];
          global_max = m > global_max ? m : global_max;
        }
        float* out = OutRow(p, s, h0 + h);
        for (int64_t c = 0; c < rank; ++c) out[c] = 0.0f;
        float total = 0.0f;
        for (int u = 0; u < threads; ++u) {
          const Partial part(ctx.OpScratch(u), d);
          if (part.row_max[h] == kNegInf) continue;  // an empty position range
          const float w = std::exp(part.row_max[h] - global_max);
          total += w * part.row_sum[h];
          ctx.k().axpy(out, part.acc + h * rank, rank, w);
        }
        ctx.k().scale(out, rank, 1.0f / total);
      }
    }
  }
}

}  // namespace mlaserve
