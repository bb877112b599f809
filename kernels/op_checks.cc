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
  return {num_tokens, num_heads, rope_dim};
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

}  // namespace mlaserve
