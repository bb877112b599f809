// One validator per elementwise-family op, shared by every backend (ref, cpu, cuda), so that all
// of them accept exactly what kernels/params.h documents. Each checks every field, aborts naming
// the offending one (a programmer error, see kernels/backend.h), and returns the op's sizes.
// Element-wise conditions that need the data (ids in range, slots inside the cache) are the
// kernels' own to check where they read them.
#ifndef MLASERVE_KERNELS_OP_CHECKS_H_
#define MLASERVE_KERNELS_OP_CHECKS_H_

#include <cstdint>

#include "kernels/params.h"

namespace mlaserve {

struct EmbeddingShape {
  int64_t num_tokens, vocab, hidden;
};
EmbeddingShape CheckEmbedding(const EmbeddingParams& p);

struct RowsShape {
  int64_t rows, cols;
};
// x, out (and residual when present) [rows, cols]; weight [cols].
RowsShape CheckRmsNorm(const RmsNormParams& p);
// x [rows, 2 * cols], out [rows, cols].
RowsShape CheckSiluMul(const SiluMulParams& p);
// a, b, out [rows, cols].
RowsShape CheckAdd(const AddParams& p);

// src and dst of one shape, f32/bf16 both ways or i32 to i32, not overlapping.
void CheckCopy(const CopyParams& p);

struct RopeShape {
  int64_t num_tokens, num_heads, rope_dim;
  int64_t num_heads2;  // of x2; 0 without it
};
RopeShape CheckRope(const RopeParams& p);

struct KvWriteShape {
  int64_t num_tokens, rank, rope_dim, num_slots;  // num_slots: blocks * block_size
};
KvWriteShape CheckKvWrite(const KvWriteParams& p);

struct GatherKvShape {
  int64_t num_blocks, block_size, kv_dim, num_seqs, num_out;
};
// cu_seq_lens is checked for shape only: its values are device data on a device backend (the
// host backends check them where they read them).
GatherKvShape CheckGatherKv(const GatherKvParams& p);

struct MlaDecodeShape {
  int64_t num_seqs, num_heads, rank, rope_dim, num_blocks, block_size;
};
MlaDecodeShape CheckMlaDecode(const MlaDecodeParams& p);

struct MlaPrefillShape {
  int64_t num_q, num_kv, num_heads, nope_dim, rope_dim, v_dim, num_seqs;
};
// cu_seqlens are checked for shape only (see CheckGatherKv).
MlaPrefillShape CheckMlaPrefill(const MlaPrefillParams& p);

struct MergeAttnShape {
  int64_t num_tokens, num_heads, dim;
};
MergeAttnShape CheckMergeAttn(const MergeAttnParams& p);

struct TopLogprobsShape {
  int64_t rows, vocab, k;
};
// logits [rows, vocab] (rows contiguous); top_ids and top_logprobs [rows, k], 1 <= k <= vocab.
TopLogprobsShape CheckTopLogprobs(const TopLogprobsParams& p);

// logits [rows, vocab] (vocab >= 1); options [rows, 8] contiguous; token_ids, logprobs [rows].
RowsShape CheckSampleTokens(const SampleTokensParams& p);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_OP_CHECKS_H_
