#include "kernels/op_checks.h"

#include "kernels/check.h"
#include "kernels/shape_check.h"

namespace mlaserve {

EmbeddingShape CheckEmbedding(const EmbeddingParams& p) {
  CheckTensor(p.ids, "Embedding.ids", DType::kI32, {kAnyDim});
  const int64_t num_tokens = p.ids.size(0);
  CheckTensor(p.table, "Embedding.table", kWeightDTypes, {kAnyDim, kAnyDim});
  const int64_t vocab = p.table.size(0), hidden = p.table.size(1);
  CheckTensor(p.out, "Embedding.out", DType::kF32, {num_tokens, hidden});
  return {num_tokens, vocab, hidden};
}

RowsShape CheckRmsNorm(const RmsNormParams& p) {
  CheckTensor(p.x, "RmsNorm.x", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t rows = p.x.size(0), dim = p.x.size(1);
  CheckTensor(p.weight, "RmsNorm.weight", kWeightDTypes, {dim});
  CheckTensor(p.out, "RmsNorm.out", DType::kF32, {rows, dim});
  if (!p.residual.empty()) CheckTensor(p.residual, "RmsNorm.residual", DType::kF32, {rows, dim});
  if (!p.addend.empty()) {
    MLASERVE_CHECK(!p.residual.empty());  // an addend is added to the residual stream
    CheckTensor(p.addend, "RmsNorm.addend", DType::kF32, {rows, dim});
  }
  return {rows, dim};
}

RowsShape CheckSiluMul(const SiluMulParams& p) {
  CheckTensor(p.x, "SiluMul.x", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.x.size(0), inter = p.x.size(1) / 2;
  MLASERVE_CHECK(p.x.size(1) == 2 * inter);
  CheckTensor(p.out, "SiluMul.out", DType::kF32, {num_tokens, inter});
  return {num_tokens, inter};
}

RowsShape CheckAdd(const AddParams& p) {
  CheckTensor(p.a, "Add.a", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t rows = p.a.size(0), cols = p.a.size(1);
  CheckTensor(p.b, "Add.b", DType::kF32, {rows, cols});
  CheckTensor(p.out, "Add.out", DType::kF32, {rows, cols});
  return {rows, cols};
}

void CheckCopy(const CopyParams& p) {
  MLASERVE_CHECK(!p.src.empty() && !p.dst.empty() && p.src.ndim() == p.dst.ndim());
  for (int d = 0; d < p.src.ndim(); ++d) MLASERVE_CHECK(p.src.size(d) == p.dst.size(d));
  const bool ints = p.src.dtype() == DType::kI32 && p.dst.dtype() == DType::kI32;
  MLASERVE_CHECK(ints ||
                 (kWeightDTypes.contains(p.src.dtype()) && kWeightDTypes.contains(p.dst.dtype())));
  MLASERVE_CHECK(!Overlaps(p.src, p.dst));
}

RopeShape CheckRope(const RopeParams& p) {
  CheckTensor(p.x, "ApplyRope.x", DType::kF32, {kAnyDim, kAnyDim, kAnyDim});
  const int64_t num_tokens = p.x.size(0), num_heads = p.x.size(1), rope_dim = p.x.size(2);
  MLASERVE_CHECK(rope_dim % 2 == 0);
  CheckTensor(p.positions, "ApplyRope.positions", DType::kI32, {num_tokens});
  CheckTensor(p.cos_sin, "ApplyRope.cos_sin", DType::kF32, {kAnyDim, rope_dim});
  CheckContiguous(p.cos_sin, "ApplyRope.cos_sin");
  if (!p.x2.empty()) {
    CheckTensor(p.x2, "ApplyRope.x2", DType::kF32, {num_tokens, kAnyDim, rope_dim});
  }
  return {num_tokens, num_heads, rope_dim, p.x2.empty() ? 0 : p.x2.size(1)};
}

KvWriteShape CheckKvWrite(const KvWriteParams& p) {
  CheckTensor(p.latent, "WriteKvCache.latent", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t num_tokens = p.latent.size(0), rank = p.latent.size(1);
  CheckTensor(p.k_pe, "WriteKvCache.k_pe", DType::kF32, {num_tokens, kAnyDim});
  const int64_t rope_dim = p.k_pe.size(1);
  CheckTensor(p.slot_mapping, "WriteKvCache.slot_mapping", DType::kI32, {num_tokens});
  CheckTensor(p.kv_cache, "WriteKvCache.kv_cache", kKvCacheDTypes,
              {kAnyDim, kAnyDim, rank + rope_dim});
  CheckContiguous(p.kv_cache, "WriteKvCache.kv_cache");
  return {num_tokens, rank, rope_dim, p.kv_cache.size(0) * p.kv_cache.size(1)};
}

GatherKvShape CheckGatherKv(const GatherKvParams& p) {
  CheckTensor(p.kv_cache, "GatherKvCache.kv_cache", kKvCacheDTypes, {kAnyDim, kAnyDim, kAnyDim});
  CheckContiguous(p.kv_cache, "GatherKvCache.kv_cache");
  const int64_t num_blocks = p.kv_cache.size(0), block_size = p.kv_cache.size(1);
  const int64_t kv_dim = p.kv_cache.size(2);
  CheckTensor(p.block_tables, "GatherKvCache.block_tables", DType::kI32, {kAnyDim, kAnyDim});
  const int64_t num_seqs = p.block_tables.size(0);
  CheckTensor(p.seq_starts, "GatherKvCache.seq_starts", DType::kI32, {num_seqs});
  CheckTensor(p.out, "GatherKvCache.out", DType::kF32, {kAnyDim, kv_dim});
  CheckTensor(p.cu_seq_lens, "GatherKvCache.cu_seq_lens", DType::kI32, {num_seqs + 1});
  return {num_blocks, block_size, kv_dim, num_seqs, p.out.size(0)};
}

MlaDecodeShape CheckMlaDecode(const MlaDecodeParams& p) {
  CheckTensor(p.q_latent, "MlaDecode.q_latent", DType::kF32, {kAnyDim, kAnyDim, kAnyDim});
  const int64_t num_seqs = p.q_latent.size(0), num_heads = p.q_latent.size(1);
  const int64_t rank = p.q_latent.size(2);
  CheckTensor(p.q_pe, "MlaDecode.q_pe", DType::kF32, {num_seqs, num_heads, kAnyDim});
  const int64_t rope_dim = p.q_pe.size(2);
  CheckTensor(p.kv_cache, "MlaDecode.kv_cache", kKvCacheDTypes,
              {kAnyDim, kAnyDim, rank + rope_dim});
  CheckContiguous(p.kv_cache, "MlaDecode.kv_cache");
  CheckTensor(p.block_tables, "MlaDecode.block_tables", DType::kI32, {num_seqs, kAnyDim});
  CheckTensor(p.seq_lens, "MlaDecode.seq_lens", DType::kI32, {num_seqs});
  CheckTensor(p.out, "MlaDecode.out", DType::kF32, {num_seqs, num_heads, rank});
  if (!p.split_items.empty()) {
    CheckTensor(p.split_items, "MlaDecode.split_items", DType::kI32, {kAnyDim, 3});
    CheckContiguous(p.split_items, "MlaDecode.split_items");
    const int64_t capacity = p.split_items.size(0);
    CheckTensor(p.split_offsets, "MlaDecode.split_offsets", DType::kI32, {num_seqs + 1});
    CheckTensor(p.split_out, "MlaDecode.split_out", DType::kF32, {capacity, num_heads, rank});
    CheckTensor(p.split_lse, "MlaDecode.split_lse", DType::kF32, {capacity, num_heads});
  } else {
    MLASERVE_CHECK_MSG(p.split_offsets.empty() && p.split_out.empty() && p.split_lse.empty(),
                       "MlaDecode: split_items, split_offsets, split_out and split_lse go together");
  }
  return {num_seqs, num_heads, rank, rope_dim, p.kv_cache.size(0), p.kv_cache.size(1)};
}

MlaPrefillShape CheckMlaPrefill(const MlaPrefillParams& p) {
  CheckTensor(p.k_nope, "MlaPrefill.k_nope", DType::kF32, {kAnyDim, kAnyDim, kAnyDim});
  const int64_t num_kv = p.k_nope.size(0), num_heads = p.k_nope.size(1);
  const int64_t nope_dim = p.k_nope.size(2);
  CheckTensor(p.k_pe, "MlaPrefill.k_pe", DType::kF32, {num_kv, kAnyDim});
  const int64_t rope_dim = p.k_pe.size(1);
  CheckTensor(p.q, "MlaPrefill.q", DType::kF32, {kAnyDim, num_heads, nope_dim + rope_dim});
  const int64_t num_q = p.q.size(0);
  CheckTensor(p.v, "MlaPrefill.v", DType::kF32, {num_kv, num_heads, kAnyDim});
  const int64_t v_dim = p.v.size(2);
  CheckTensor(p.out, "MlaPrefill.out", DType::kF32, {num_q, num_heads, v_dim});
  if (!p.lse.empty()) CheckTensor(p.lse, "MlaPrefill.lse", DType::kF32, {num_q, num_heads});
  MLASERVE_CHECK(!p.cu_seqlens_q.empty());
  const int64_t num_seqs = p.cu_seqlens_q.size(0) - 1;
  CheckTensor(p.cu_seqlens_q, "MlaPrefill.cu_seqlens_q", DType::kI32, {num_seqs + 1});
  CheckTensor(p.cu_seqlens_kv, "MlaPrefill.cu_seqlens_kv", DType::kI32, {num_seqs + 1});
  return {num_q, num_kv, num_heads, nope_dim, rope_dim, v_dim, num_seqs};
}

MergeAttnShape CheckMergeAttn(const MergeAttnParams& p) {
  CheckTensor(p.out, "MergeAttn.out", DType::kF32, {kAnyDim, kAnyDim, kAnyDim});
  const int64_t num_tokens = p.out.size(0), num_heads = p.out.size(1), dim = p.out.size(2);
  CheckTensor(p.lse, "MergeAttn.lse", DType::kF32, {num_tokens, num_heads});
  CheckTensor(p.suffix_out, "MergeAttn.suffix_out", DType::kF32, {num_tokens, num_heads, dim});
  CheckTensor(p.suffix_lse, "MergeAttn.suffix_lse", DType::kF32, {num_tokens, num_heads});
  return {num_tokens, num_heads, dim};
}

TopLogprobsShape CheckTopLogprobs(const TopLogprobsParams& p) {
  CheckTensor(p.logits, "TopLogprobs.logits", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t rows = p.logits.size(0), vocab = p.logits.size(1);
  CheckTensor(p.top_ids, "TopLogprobs.top_ids", DType::kI32, {rows, kAnyDim});
  const int64_t k = p.top_ids.size(1);
  MLASERVE_CHECK_MSG(k >= 1 && k <= vocab, "TopLogprobs.top_ids: k must be in [1, vocab]");
  CheckTensor(p.top_logprobs, "TopLogprobs.top_logprobs", DType::kF32, {rows, k});
  return {rows, vocab, k};
}

RowsShape CheckSampleTokens(const SampleTokensParams& p) {
  CheckTensor(p.logits, "SampleTokens.logits", DType::kF32, {kAnyDim, kAnyDim});
  const int64_t rows = p.logits.size(0), vocab = p.logits.size(1);
  MLASERVE_CHECK_MSG(vocab >= 1 || rows == 0, "SampleTokens.logits: empty vocabulary");
  CheckTensor(p.options, "SampleTokens.options", DType::kI32, {rows, 8});
  CheckContiguous(p.options, "SampleTokens.options");
  CheckTensor(p.token_ids, "SampleTokens.token_ids", DType::kI32, {rows});
  CheckTensor(p.logprobs, "SampleTokens.logprobs", DType::kF32, {rows});
  return {rows, vocab};
}

}  // namespace mlaserve
