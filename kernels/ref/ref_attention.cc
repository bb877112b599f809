// RefBackend: paged latent KV cache and MLA attention.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/op_checks.h"
#include "kernels/ref/ref_access.h"
#include "kernels/ref/ref_backend.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

using ref::Load;
using ref::LoadI32;
using ref::Off;
using ref::Store;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Checks a [num_seqs + 1] exclusive scan that starts at 0, never decreases and ends at or
// below `limit` rows.
void CheckCuSeqlens(const TensorView& cu, const char* name, int64_t num_seqs, int64_t limit) {
  CheckTensor(cu, name, DType::kI32, {num_seqs + 1});
  MLASERVE_CHECK(LoadI32(cu, 0) == 0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    MLASERVE_CHECK(LoadI32(cu, Off(cu, s)) <= LoadI32(cu, Off(cu, s + 1)));
  }
  MLASERVE_CHECK(LoadI32(cu, Off(cu, num_seqs)) <= limit);
}

// Cache row (block, offset) of position `pos` of the sequence whose block table row is `seq`.
int64_t CacheRow(const TensorView& block_tables, int64_t seq, int64_t pos, int64_t block_size,
                 int64_t num_blocks) {
  const int64_t slot = pos / block_size;
  MLASERVE_CHECK(pos >= 0 && slot < block_tables.size(1));
  const int32_t block = LoadI32(block_tables, Off(block_tables, seq, slot));
  MLASERVE_CHECK(block >= 0 && block < num_blocks);
  return block * block_size + pos % block_size;
}

// Softmax of scores[0, n) in place; returns the natural-log sum of exp. Requires n > 0.
double SoftmaxInPlace(std::vector<double>& scores, int64_t n) {
  const double max = *std::max_element(scores.begin(), scores.begin() + n);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(scores[j] - max);
  for (int64_t j = 0; j < n; ++j) scores[j] = std::exp(scores[j] - max) / sum;
  return max + std::log(sum);
}

}  // namespace

void RefBackend::RunWriteKvCache(const KvWriteParams& p) {
  const KvWriteShape shape = CheckKvWrite(p);
  const int64_t num_tokens = shape.num_tokens, rank = shape.rank, rope_dim = shape.rope_dim;
  CheckContiguous(p.kv_cache, "WriteKvCache.kv_cache");
  const int64_t num_slots = p.kv_cache.size(0) * p.kv_cache.size(1);
  const int64_t row = rank + rope_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t slot = LoadI32(p.slot_mapping, Off(p.slot_mapping, t));
    if (slot < 0) continue;
    MLASERVE_CHECK(slot < num_slots);
    for (int64_t i = 0; i < rank; ++i) {
      Store(p.kv_cache, slot * row + i, Load(p.latent, Off(p.latent, t, i)));
    }
    for (int64_t i = 0; i < rope_dim; ++i) {
      Store(p.kv_cache, slot * row + rank + i, Load(p.k_pe, Off(p.k_pe, t, i)));
    }
  }
}

void RefBackend::RunGatherKvCache(const GatherKvParams& p) {
  const GatherKvShape shape = CheckGatherKv(p);
  const int64_t num_blocks = shape.num_blocks, block_size = shape.block_size;
  const int64_t kv_dim = shape.kv_dim, num_seqs = shape.num_seqs;
  CheckCuSeqlens(p.cu_seq_lens, "GatherKvCache.cu_seq_lens", num_seqs, p.out.size(0));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t begin = LoadI32(p.cu_seq_lens, Off(p.cu_seq_lens, s));
    const int32_t end = LoadI32(p.cu_seq_lens, Off(p.cu_seq_lens, s + 1));
    const int32_t start = LoadI32(p.seq_starts, Off(p.seq_starts, s));
    for (int64_t i = 0; i < end - begin; ++i) {
      const int64_t row = CacheRow(p.block_tables, s, start + i, block_size, num_blocks);
      for (int64_t c = 0; c < kv_dim; ++c) {
        Store(p.out, Off(p.out, begin + i, c), Load(p.kv_cache, row * kv_dim + c));
      }
    }
  }
}

void RefBackend::RunMlaPrefill(const MlaPrefillParams& p) {
  const MlaPrefillShape shape = CheckMlaPrefill(p);
  const int64_t num_kv = shape.num_kv, num_heads = shape.num_heads, nope_dim = shape.nope_dim;
  const int64_t rope_dim = shape.rope_dim, num_q = shape.num_q, v_dim = shape.v_dim;
  const bool has_lse = !p.lse.empty();
  if (has_lse) CheckTensor(p.lse, "MlaPrefill.lse", DType::kF32, {num_q, num_heads});
  MLASERVE_CHECK(!p.cu_seqlens_q.empty());
  const int64_t num_seqs = p.cu_seqlens_q.size(0) - 1;
  CheckCuSeqlens(p.cu_seqlens_q, "MlaPrefill.cu_seqlens_q", num_seqs, num_q);
  CheckCuSeqlens(p.cu_seqlens_kv, "MlaPrefill.cu_seqlens_kv", num_seqs, num_kv);

  std::vector<double> probs;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q0 = LoadI32(p.cu_seqlens_q, Off(p.cu_seqlens_q, s));
    const int64_t len_q = LoadI32(p.cu_seqlens_q, Off(p.cu_seqlens_q, s + 1)) - q0;
    const int64_t k0 = LoadI32(p.cu_seqlens_kv, Off(p.cu_seqlens_kv, s));
    const int64_t len_kv = LoadI32(p.cu_seqlens_kv, Off(p.cu_seqlens_kv, s + 1)) - k0;
    probs.resize(std::max<int64_t>(len_kv, 1));
    for (int64_t i = 0; i < len_q; ++i) {
      // Bottom-right alignment: the last query sees every key.
      const int64_t visible =
          p.causal ? std::clamp<int64_t>(i + len_kv - len_q + 1, 0, len_kv) : len_kv;
      for (int64_t h = 0; h < num_heads; ++h) {
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < nope_dim; ++d) {
            dot += Load(p.q, Off(p.q, q0 + i, h, d)) * Load(p.k_nope, Off(p.k_nope, k0 + j, h, d));
          }
          for (int64_t d = 0; d < rope_dim; ++d) {
            dot +=
                Load(p.q, Off(p.q, q0 + i, h, nope_dim + d)) * Load(p.k_pe, Off(p.k_pe, k0 + j, d));
          }
          probs[j] = p.softmax_scale * dot;
        }
        const double lse = visible > 0 ? SoftmaxInPlace(probs, visible) : kNegInf;
        for (int64_t d = 0; d < v_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < visible; ++j) acc += probs[j] * Load(p.v, Off(p.v, k0 + j, h, d));
          Store(p.out, Off(p.out, q0 + i, h, d), acc);
        }
        if (has_lse) Store(p.lse, Off(p.lse, q0 + i, h), lse);
      }
    }
  }
}

void RefBackend::RunMergeAttn(const MergeAttnParams& p) {
  const MergeAttnShape shape = CheckMergeAttn(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads, dim = shape.dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < num_heads; ++h) {
      const double lse_a = Load(p.lse, Off(p.lse, t, h));
      const double lse_b = Load(p.suffix_lse, Off(p.suffix_lse, t, h));
      // A -inf side has no keys: its weight is exactly 0, whatever its out holds.
      const double merged = lse_a == kNegInf   ? lse_b
                            : lse_b == kNegInf ? lse_a
                                               : std::max(lse_a, lse_b) +
                                                     std::log1p(std::exp(-std::abs(lse_a - lse_b)));
      const double wa = lse_a == kNegInf ? 0.0 : std::exp(lse_a - merged);
      const double wb = lse_b == kNegInf ? 0.0 : std::exp(lse_b - merged);
      for (int64_t d = 0; d < dim; ++d) {
        const double a = wa == 0.0 ? 0.0 : wa * Load(p.out, Off(p.out, t, h, d));
        const double b = wb == 0.0 ? 0.0 : wb * Load(p.suffix_out, Off(p.suffix_out, t, h, d));
        Store(p.out, Off(p.out, t, h, d), a + b);
      }
      Store(p.lse, Off(p.lse, t, h), merged);
    }
  }
}

void RefBackend::RunMlaDecode(const MlaDecodeParams& p) {
  const MlaDecodeShape shape = CheckMlaDecode(p);
  const int64_t num_seqs = shape.num_seqs, num_heads = shape.num_heads, rank = shape.rank;
  const int64_t rope_dim = shape.rope_dim;
  const int64_t num_blocks = p.kv_cache.size(0), block_size = p.kv_cache.size(1);
  const int64_t row_dim = rank + rope_dim;

  std::vector<double> probs;
  std::vector<int64_t> rows;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t len = LoadI32(p.seq_lens, Off(p.seq_lens, s));
    MLASERVE_CHECK(len >= 1);
    rows.resize(len);
    probs.resize(len);
    for (int64_t j = 0; j < len; ++j) {
      rows[j] = CacheRow(p.block_tables, s, j, block_size, num_blocks) * row_dim;
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t j = 0; j < len; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < rank; ++c) {
          dot += Load(p.q_latent, Off(p.q_latent, s, h, c)) * Load(p.kv_cache, rows[j] + c);
        }
        for (int64_t d = 0; d < rope_dim; ++d) {
          dot += Load(p.q_pe, Off(p.q_pe, s, h, d)) * Load(p.kv_cache, rows[j] + rank + d);
        }
        probs[j] = p.softmax_scale * dot;
      }
      SoftmaxInPlace(probs, len);
      for (int64_t c = 0; c < rank; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < len; ++j) acc += probs[j] * Load(p.kv_cache, rows[j] + c);
        Store(p.out, Off(p.out, s, h, c), acc);
      }
    }
  }
}

}  // namespace mlaserve
