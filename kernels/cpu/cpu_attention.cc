// MLA attention: prefill over decompressed keys, merge of partial results, and absorbed decode
// over the paged latent cache. Both attention ops are flash-style: scores of a tile of keys
// come from the GEMM kernel, an online softmax keeps a running max and sum per query row, and
// the value product accumulates in f32 scratch.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_context.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows per prefill work item and keys per score tile.
constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 64;

// One online-softmax step for a row of scores: s[0, visible) are live (already scaled),
// s[visible, len) are masked. Rescales the row's accumulator o (o_len floats) to the new
// max and turns s into probabilities relative to it (masked entries become 0).
void SoftmaxStep(const CpuKernels& k, float* s, int64_t visible, int64_t len, float* max,
                 float* sum, float* o, int64_t o_len) {
  for (int64_t j = visible; j < len; ++j) s[j] = 0.0f;
  if (visible == 0) return;
  const float tile_max = k.max(s, visible);
  const float new_max = tile_max > *max ? tile_max : *max;
  if (new_max != *max) {
    const float alpha = *max == kNegInf ? 0.0f : std::exp(*max - new_max);
    if (alpha == 0.0f) {
      for (int64_t i = 0; i < o_len; ++i) o[i] = 0.0f;
    } else {
      k.scale(o, o_len, alpha);
    }
    *sum *= alpha;
    *max = new_max;
  }
  *sum += k.exp_sum(s, visible, new_max);
}

int32_t I32(const TensorView& v, int64_t i) { return v.ptr<const int32_t>()[i * v.stride(0)]; }

void CheckCuSeqlens(const TensorView& cu, const char* name, int64_t num_seqs, int64_t limit) {
  CheckTensor(cu, name, DType::kI32, {num_seqs + 1});
  MLASERVE_CHECK(I32(cu, 0) == 0);
  for (int64_t s = 0; s < num_seqs; ++s) MLASERVE_CHECK(I32(cu, s) <= I32(cu, s + 1));
  MLASERVE_CHECK(I32(cu, num_seqs) <= limit);
}

// One query tile of one head of one sequence: rows [i0, i0 + rows) of the sequence's queries,
// online softmax over key tiles, written to out (and lse). `scratch` holds the tile's scores,
// accumulator and running max and sum (see CpuMlaPrefill).
struct PrefillTile {
  int64_t seq_q0, seq_k0, len_q, len_kv;  // the sequence's first query and key row, its lengths
  int64_t head, i0, rows;
};

void AttendQueryTile(const CpuContext& ctx, const MlaPrefillParams& p, const PrefillTile& tile,
                     int t, float* scratch) {
  const CpuKernels& k = ctx.k();
  const int64_t nope_dim = p.k_nope.size(2), rope_dim = p.k_pe.size(1), v_dim = p.v.size(2);
  const int64_t q0 = tile.seq_q0, k0 = tile.seq_k0, h = tile.head, i0 = tile.i0, rows = tile.rows;
  const int64_t len_q = tile.len_q, len_kv = tile.len_kv;
  const float* q = p.q.ptr<const float>();
  const float* k_nope = p.k_nope.ptr<const float>();
  const float* k_pe = p.k_pe.ptr<const float>();
  const float* v = p.v.ptr<const float>();
  const bool has_lse = !p.lse.empty();
  float* scores = scratch;                    // [kQueryTile, kKeyTile]
  float* o = scores + kQueryTile * kKeyTile;  // [kQueryTile, v_dim]
  float* row_max = o + kQueryTile * v_dim;    // [kQueryTile]
  float* row_sum = row_max + kQueryTile;      // [kQueryTile]
  auto visible = [&](int64_t i) -> int64_t {
    if (!p.causal) return len_kv;
    const int64_t n = i + len_kv - len_q + 1;
    return n < 0 ? 0 : (n > len_kv ? len_kv : n);
  };
  for (int64_t i = 0; i < rows * v_dim; ++i) o[i] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    row_max[i] = kNegInf;
    row_sum[i] = 0.0f;
  }
  const float* q_tile = q + (q0 + i0) * p.q.stride(0) + h * p.q.stride(1);
  const int64_t kv_end = visible(i0 + rows - 1);
  for (int64_t j0 = 0; j0 < kv_end; j0 += kKeyTile) {
    const int64_t cols = kv_end - j0 < kKeyTile ? kv_end - j0 : kKeyTile;
    GemmArgs g;
    g.a = q_tile;
    g.lda = p.q.stride(0);
    g.b = k_nope + (k0 + j0) * p.k_nope.stride(0) + h * p.k_nope.stride(1);
    g.b_dtype = DType::kF32;
    g.ldb = p.k_nope.stride(0);
    g.c = scores;
    g.ldc = kKeyTile;
    g.m = rows;
    g.k = nope_dim;
    g.n_end = cols;
    k.gemm(g, ctx.GemmScratch(t));
    g.a = q_tile + nope_dim;
    g.b = k_pe + (k0 + j0) * p.k_pe.stride(0);
    g.ldb = p.k_pe.stride(0);
    g.k = rope_dim;
    g.accumulate = true;
    k.gemm(g, ctx.GemmScratch(t));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t live = visible(i0 + i) - j0;
      const int64_t n = live < 0 ? 0 : (live > cols ? cols : live);
      k.scale(scores + i * kKeyTile, n, p.softmax_scale);
      SoftmaxStep(k, scores + i * kKeyTile, n, cols, &row_max[i], &row_sum[i], o + i * v_dim,
                  v_dim);
    }
    GemmNnArgs pv;
    pv.a = scores;
    pv.lda = kKeyTile;
    pv.b = v + (k0 + j0) * p.v.stride(0) + h * p.v.stride(1);
    pv.b_dtype = DType::kF32;
    pv.ldb = p.v.stride(0);
    pv.c = o;
    pv.ldc = v_dim;
    pv.m = rows;
    pv.n = v_dim;
    pv.k = cols;
    k.gemm_nn(pv);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = q0 + i0 + i;
    float* dst = p.out.ptr<float>() + row * p.out.stride(0) + h * p.out.stride(1);
    const float inv = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
    for (int64_t d = 0; d < v_dim; ++d) dst[d] = o[i * v_dim + d] * inv;
    if (has_lse) {
      p.lse.ptr<float>()[row * p.lse.stride(0) + h * p.lse.stride(1)] =
          row_sum[i] > 0.0f ? row_max[i] + std::log(row_sum[i]) : kNegInf;
    }
  }
}

}  // namespace

void CpuMlaPrefill(const CpuContext& ctx, const MlaPrefillParams& p) {
  const MlaPrefillShape shape = CheckMlaPrefill(p);
  const int64_t num_kv = shape.num_kv, num_heads = shape.num_heads, nope_dim = shape.nope_dim;
  const int64_t rope_dim = shape.rope_dim, num_q = shape.num_q, v_dim = shape.v_dim;
  if (!p.lse.empty()) CheckTensor(p.lse, "MlaPrefill.lse", DType::kF32, {num_q, num_heads});
  MLASERVE_CHECK(!p.cu_seqlens_q.empty());
  const int64_t num_seqs = p.cu_seqlens_q.size(0) - 1;
  CheckCuSeqlens(p.cu_seqlens_q, "MlaPrefill.cu_seqlens_q", num_seqs, num_q);
  CheckCuSeqlens(p.cu_seqlens_kv, "MlaPrefill.cu_seqlens_kv", num_seqs, num_kv);
  MLASERVE_CHECK(kQueryTile * (kKeyTile + v_dim + 2) <= CpuContext::kOpScratchFloats);

  int64_t work = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    work += (I32(p.cu_seqlens_q, s + 1) - I32(p.cu_seqlens_q, s)) *
            (I32(p.cu_seqlens_kv, s + 1) - I32(p.cu_seqlens_kv, s));
  }
  const int threads = ctx.ThreadsFor(work * num_heads * (nope_dim + rope_dim + v_dim));

  ctx.Parallel(threads, [&](int t, int team) {
    // Items (sequence, head, query tile) are dealt round-robin: causal tiles grow along the
    // sequence, so neighbouring items go to different threads.
    int64_t item = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t q0 = I32(p.cu_seqlens_q, s), len_q = I32(p.cu_seqlens_q, s + 1) - q0;
      const int64_t k0 = I32(p.cu_seqlens_kv, s), len_kv = I32(p.cu_seqlens_kv, s + 1) - k0;
      for (int64_t h = 0; h < num_heads; ++h) {
        for (int64_t i0 = 0; i0 < len_q; i0 += kQueryTile, ++item) {
          if (item % team != t) continue;
          const int64_t rows = len_q - i0 < kQueryTile ? len_q - i0 : kQueryTile;
          AttendQueryTile(ctx, p, {q0, k0, len_q, len_kv, h, i0, rows}, t, ctx.OpScratch(t));
        }
      }
    }
  });
}

void CpuMergeAttn(const CpuContext& ctx, const MergeAttnParams& p) {
  const MergeAttnShape shape = CheckMergeAttn(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads, dim = shape.dim;
  const int64_t rows = num_tokens * num_heads;
  ctx.Parallel(ctx.ThreadsFor(rows * dim), [&](int t, int team) {
    const Range r = SplitRange(rows, team, t);
    for (int64_t row = r.begin; row < r.end; ++row) {
      const int64_t tok = row / num_heads, h = row % num_heads;
      float* lse = p.lse.ptr<float>() + tok * p.lse.stride(0) + h * p.lse.stride(1);
      const float lse_b =
          p.suffix_lse
              .ptr<const float>()[tok * p.suffix_lse.stride(0) + h * p.suffix_lse.stride(1)];
      const float lse_a = *lse;
      // A -inf side has no keys: its weight is exactly 0, whatever its out holds.
      const float merged = lse_a == kNegInf   ? lse_b
                           : lse_b == kNegInf ? lse_a
                                              : std::fmax(lse_a, lse_b) +
                                                    std::log1p(std::exp(-std::fabs(lse_a - lse_b)));
      const float wa = lse_a == kNegInf ? 0.0f : std::exp(lse_a - merged);
      const float wb = lse_b == kNegInf ? 0.0f : std::exp(lse_b - merged);
      float* out = p.out.ptr<float>() + tok * p.out.stride(0) + h * p.out.stride(1);
      const float* suffix = p.suffix_out.ptr<const float>() + tok * p.suffix_out.stride(0) +
                            h * p.suffix_out.stride(1);
      for (int64_t d = 0; d < dim; ++d) {
        out[d] = (wa == 0.0f ? 0.0f : wa * out[d]) + (wb == 0.0f ? 0.0f : wb * suffix[d]);
      }
      *lse = merged;
    }
  });
}

}  // namespace mlaserve
