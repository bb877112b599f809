// Parameters of every Backend op: flat, documented, no logic. Every tensor field carries its
// shape; "f32" etc. name the accepted dtypes. Views may be strided unless the comment says
// "contiguous"; the innermost dimension is always contiguous. An empty TensorView means
// "absent" for fields marked optional.
//
// Weights ("w" dtypes) are bf16 or f32; activations are f32 (the CPU default) unless a field
// says otherwise.
#ifndef MLASERVE_KERNELS_PARAMS_H_
#define MLASERVE_KERNELS_PARAMS_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace mlaserve {

// out[t, :] = table[ids[t], :]
struct EmbeddingParams {
  TensorView ids;    // [num_tokens] i32, each in [0, vocab_size)
  TensorView table;  // [vocab_size, hidden] w
  TensorView out;    // [num_tokens, hidden] f32
};

// If residual is set: residual = x + residual; out = rmsnorm(residual) * weight. With addend
// too, x + addend (rounded to f32) takes the place of x: the sum of two branches (the routed
// and the shared experts) added to the residual stream in the same op, rounded as a separate
// Add before it would round them. Otherwise: out = rmsnorm(x) * weight. out may alias x.
// Accumulation in f32.
struct RmsNormParams {
  TensorView x;         // [num_rows, dim] f32
  TensorView residual;  // optional [num_rows, dim] f32, updated in place
  TensorView addend;    // optional [num_rows, dim] f32; REQUIRES residual when set
  TensorView weight;    // [dim] w
  float eps = 1e-6f;
  TensorView out;       // [num_rows, dim] f32
};

// out[b] = a[b] · b[b]ᵀ for each batch b, f32 accumulation. 2-D views mean batch = 1.
// `out` must not overlap `a` or `b`.
struct GemmParams {
  TensorView a;    // [batch, m, k] or [m, k] f32
  TensorView b;    // [batch, n, k] or [n, k] w
  TensorView out;  // [batch, m, n] or [m, n] f32
  // Rows [0, decode_rows) of a are single-token decodes, the rest prompt tokens. A hint for
  // batch-invariant backends, which route each kind of row through one reduction order (the
  // same whatever else shares the call); others ignore it.
  int64_t decode_rows = 0;
};

// out[t, i] = silu(x[t, i]) * x[t, inter + i]   (x holds gate ‖ up)
struct SiluMulParams {
  TensorView x;    // [num_tokens, 2 * inter] f32
  TensorView out;  // [num_tokens, inter] f32
};

// Rotary embedding in place, DeepSeek's Hugging Face convention: the rope_dim values of each
// head are first de-interleaved ([x0, x2, ..., x1, x3, ...]) and then rotated with
// rotate_half, so the result is stored de-interleaved:
//   y[i]        = x[2i]   * cos[p, i] - x[2i+1] * sin[p, i]
//   y[i + d/2]  = x[2i+1] * cos[p, i] + x[2i]   * sin[p, i]      for i < d/2, p = positions[t]
struct RopeParams {
  TensorView x;          // [num_tokens, num_heads, rope_dim] f32, rotated in place
  // Optional [num_tokens, num_heads2, rope_dim] f32, rotated in place as x is, by the same
  // positions: the keys' rope part in the op that rotates the queries'.
  TensorView x2;
  TensorView positions;  // [num_tokens] i32
  TensorView cos_sin;    // [max_positions, rope_dim] f32 contiguous: rope_dim/2 cos then rope_dim/2
                         // sin, YaRN mscale already folded in
};

// kv_cache[slot / block_size, slot % block_size, :] = latent[t] ‖ k_pe[t], slot = slot_mapping[t].
// A negative slot skips the token (padding).
struct KvWriteParams {
  TensorView latent;        // [num_tokens, kv_lora_rank] f32 (kv_a_layernorm applied)
  TensorView k_pe;          // [num_tokens, rope_dim] f32 (rope applied)
  TensorView slot_mapping;  // [num_tokens] i32
  TensorView kv_cache;      // [num_blocks, block_size, kv_lora_rank + rope_dim] f32|bf16 contiguous
};

// out[cu_seq_lens[s] + i, :] = cache row of position seq_starts[s] + i of sequence s,
// for i < cu_seq_lens[s + 1] - cu_seq_lens[s]. Converts to f32.
struct GatherKvParams {
  TensorView kv_cache;      // [num_blocks, block_size, kv_dim] f32|bf16 contiguous
  TensorView block_tables;  // [num_seqs, max_blocks_per_seq] i32
  TensorView cu_seq_lens;   // [num_seqs + 1] i32, exclusive scan of gathered tokens per sequence
  TensorView seq_starts;    // [num_seqs] i32, first position gathered per sequence
  TensorView out;           // [total_tokens, kv_dim] f32
};

// Multi-head attention of prefill tokens over decompressed keys/values (MLA prefill path).
// Sequence s owns q rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and kv rows
// [cu_seqlens_kv[s], cu_seqlens_kv[s+1]). Key j of head h is k_nope[j, h] ‖ k_pe[j]; query i of
// head h is q[i, h]. With causal, the masks align bottom-right: query i (0-based in its
// sequence) sees keys j <= i + (len_kv - len_q). Softmax in f32.
// A query that sees no key gets out = 0 and lse = -inf.
struct MlaPrefillParams {
  TensorView q;              // [num_q_tokens, num_heads, qk_nope_dim + rope_dim] f32
  TensorView k_nope;         // [num_kv_tokens, num_heads, qk_nope_dim] f32
  TensorView k_pe;           // [num_kv_tokens, rope_dim] f32, shared by all heads
  TensorView v;              // [num_kv_tokens, num_heads, v_head_dim] f32
  TensorView cu_seqlens_q;   // [num_seqs + 1] i32
  TensorView cu_seqlens_kv;  // [num_seqs + 1] i32
  bool causal = true;
  float softmax_scale = 1.0f;
  TensorView out;            // [num_q_tokens, num_heads, v_head_dim] f32
  TensorView lse;            // optional [num_q_tokens, num_heads] f32: natural-log sum of exp of
                             // scaled scores
};

// Merges two partial attention results over disjoint key sets, in place into (out, lse):
//   lse' = logaddexp(lse, suffix_lse); out' = out * exp(lse - lse') + suffix_out * exp(suffix_lse - lse')
// A side with lse = -inf contributes nothing.
struct MergeAttnParams {
  TensorView out;         // [num_tokens, num_heads, head_dim] f32, in/out
  TensorView lse;         // [num_tokens, num_heads] f32, in/out
  TensorView suffix_out;  // [num_tokens, num_heads, head_dim] f32
  TensorView suffix_lse;  // [num_tokens, num_heads] f32
};

// Absorbed MLA decode: one query token per sequence attends over the sequence's first
// seq_lens[s] cached positions (the current token's latent already written).
//   score[j] = scale * (q_latent[s, h] · c[j] + q_pe[s, h] · k_pe[j]), c ‖ k_pe = cache row j
//   out[s, h] = Σ_j softmax(score)[j] * c[j]
struct MlaDecodeParams {
  TensorView q_latent;      // [num_seqs, num_heads, kv_lora_rank] f32 (q_nope · W_UK)
  TensorView q_pe;          // [num_seqs, num_heads, rope_dim] f32 (rope applied)
  TensorView kv_cache;      // [num_blocks, block_size, kv_lora_rank + rope_dim] f32|bf16 contiguous
  TensorView block_tables;  // [num_seqs, max_blocks_per_seq] i32
  TensorView seq_lens;      // [num_seqs] i32, >= 1
  float softmax_scale = 1.0f;
  TensorView out;           // [num_seqs, num_heads, kv_lora_rank] f32
  // Optional split-KV plan (kernels/mla_split_plan.h, all four set or none), for backends that
  // attend one sequence's positions with several parallel work items and merge the partial
  // results by log-sum-exp (the CUDA backend); the others ignore it. Without a plan such a
  // backend gives each sequence one work item.
  TensorView split_offsets;  // [num_seqs + 1] i32: sequence s owns items [o[s], o[s + 1])
  TensorView split_items;    // [capacity, 3] i32: (seq, begin, end) per item; seq < 0 unused,
                             // and every unused slot after the last used one (PlanMlaSplits)
  TensorView split_out;      // [capacity, num_heads, kv_lora_rank] f32 workspace
  TensorView split_lse;      // [capacity, num_heads] f32 workspace
};

enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };
enum class MoeTopkMethod : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc };

// Router: logits -> top_k experts and their combine weights (all in f32).
//   scores = softmax(logits) or sigmoid(logits)
//   kGreedy:            top_k of scores
//   kGroupLimitedGreedy: group score = max of the group's scores; keep the topk_group best groups;
//                        top_k of the kept scores
//   kNoauxTc:           choice = scores + correction_bias; group score = sum of the group's two
//                        largest choice values; keep topk_group groups; top_k of kept choice;
//                        weights = scores (without bias) of the chosen experts
//   if top_k > 1 and norm_topk_prob: weights /= (sum(weights) + 1e-20)
//   weights *= routed_scaling_factor when scale_always, or when not normalised (V2 rule)
// Ties pick the lower expert id. Output order within a token: descending choice value.
struct MoeRouteParams {
  TensorView logits;           // [num_tokens, num_experts] f32
  TensorView correction_bias;  // [num_experts] f32, required for kNoauxTc only
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopkMethod method = MoeTopkMethod::kGreedy;
  int n_group = 1;
  int topk_group = 1;
  int top_k = 1;
  bool norm_topk_prob = false;
  bool scale_always = false;  // DeepSeek-V3 semantics
  float routed_scaling_factor = 1.0f;
  TensorView topk_ids;         // [num_tokens, top_k] i32
  TensorView topk_weights;     // [num_tokens, top_k] f32
};

// Sorts (token, k) pairs by expert: each expert's run is padded to a multiple of block_size.
// Pair p = t * top_k + k. Padding entries hold the sentinel num_tokens * top_k.
// Only the first num_tokens_post_pad[0] entries of sorted_ids are written.
struct MoeAlignParams {
  TensorView topk_ids;             // [num_tokens, top_k] i32
  int num_experts = 0;
  int block_size = 16;
  TensorView sorted_ids;           // [num_tokens * top_k + num_experts * (block_size - 1)] i32
  TensorView block_expert_ids;     // [ceil(len(sorted_ids) / block_size)] i32, expert of each block
  TensorView expert_offsets;       // [num_experts + 1] i32, exclusive scan of padded counts
  TensorView num_tokens_post_pad;  // [1] i32, = expert_offsets[num_experts]
};

// Routed experts: out[t] = Σ_k topk_weights[t, k] * E_e(x[t]), e = topk_ids[t, k], where
// E_e(x) = w2[e] · (silu(w13[e, :inter] · x) * (w13[e, inter:] · x)). Uses the MoeAlign output.
// out is overwritten (tokens with no pairs get zeros).
struct MoeExpertsParams {
  TensorView x;                    // [num_tokens, hidden] f32
  TensorView w13;                  // [num_experts, 2 * inter, hidden] w contiguous (gate ‖ up)
  TensorView w2;                   // [num_experts, hidden, inter] w contiguous
  TensorView topk_weights;         // [num_tokens, top_k] f32
  TensorView sorted_ids;           // from MoeAlignParams
  TensorView block_expert_ids;     // from MoeAlignParams
  TensorView expert_offsets;       // from MoeAlignParams
  TensorView num_tokens_post_pad;  // from MoeAlignParams
  int block_size = 16;
  TensorView workspace_gate_up;    // [len(sorted_ids), 2 * inter] f32
  TensorView workspace_act;        // [len(sorted_ids), inter] f32
  TensorView workspace_down;       // [len(sorted_ids), hidden] f32
  TensorView out;                  // [num_tokens, hidden] f32
  // Tokens [0, decode_tokens) are single-token decodes (see GemmParams::decode_rows).
  int64_t decode_tokens = 0;
};

// out = a + b (elementwise). out may alias a or b.
struct AddParams {
  TensorView a;    // [rows, cols] f32
  TensorView b;    // [rows, cols] f32
  TensorView out;  // [rows, cols] f32
};

// The k best tokens of each row of logits with their raw log-softmax (greedy selection on the
// device: column 0 is the argmax). Order: descending logit, ties to the lower id.
//   top_ids[r, i] = i-th best id; top_logprobs[r, i] = logits[r, id] - log Σ_v exp(logits[r, v])
struct TopLogprobsParams {
  TensorView logits;        // [rows, vocab] f32
  TensorView top_ids;       // [rows, k] i32, 1 <= k <= vocab
  TensorView top_logprobs;  // [rows, k] f32
};

// Draws one token per row the way the host sampler does (kernels/sampling_math.h: the kept set
// by top-k, min-p and top-p in rank order, then the Gumbel-max pick with (seed, position,
// token) noise; temperature 0: the argmax, ties to the lower id), and the drawn token's raw
// log-softmax. Penalties are not applied: rows that need them are sampled on the host.
struct SampleTokensParams {
  TensorView logits;     // [rows, vocab] f32
  TensorView options;    // [rows, 8] i32 contiguous: one sampling::RowOptions per row
  TensorView token_ids;  // [rows] i32
  TensorView logprobs;   // [rows] f32
};

// Strided copy with conversion to dst's dtype (f32 <-> bf16 <-> f32; i32 -> i32).
struct CopyParams {
  TensorView src;  // any shape
  TensorView dst;  // same shape
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_PARAMS_H_
