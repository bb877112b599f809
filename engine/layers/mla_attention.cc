#include "engine/layers/mla_attention.h"

namespace mlaserve {
namespace {

// The first `rows` rows of a [max_rows, ...] workspace tensor.
TensorView Rows(const TensorView& t, int64_t begin, int64_t rows) { return t.Slice(0, begin, rows); }

}  // namespace

MlaAttention::MlaAttention(const ModelConfig& config, Backend* backend, TensorView cos_sin,
                           float softmax_scale)
    : c_(config), backend_(backend), cos_sin_(cos_sin), softmax_scale_(softmax_scale) {}

void MlaAttention::Forward(const LayerWeights& w, const ForwardBatch& fb, const TensorView& x,
                           const TensorView& kv_cache, const MlaWorkspace& ws,
                           const TensorView& out) const {
  const int64_t t = fb.num_tokens, d = fb.num_decodes, heads = c_.num_attention_heads;
  const int64_t r = c_.kv_lora_rank, rope = c_.qk_rope_head_dim, nope = c_.qk_nope_head_dim;
  Backend& b = *backend_;

  // 1. Queries, [t, heads, nope + rope].
  const TensorView q = Rows(ws.q, 0, t);
  const TensorView q_flat = q.Reshape({t, heads * c_.qk_head_dim()});
  if (c_.q_lora_rank == 0) {
    b.Gemm({.a = x, .b = w.q_proj, .out = q_flat, .decode_rows = d});
  } else {
    const TensorView q_a = Rows(ws.q_a, 0, t);
    b.Gemm({.a = x, .b = w.q_a, .out = q_a, .decode_rows = d});
    b.RmsNorm({.x = q_a, .weight = w.q_a_norm, .eps = 1e-6f, .out = q_a});
    b.Gemm({.a = q_a, .b = w.q_b, .out = q_flat, .decode_rows = d});
  }
  // 2. Compressed KV: latent (normalised) ‖ k_pe, written to the paged cache.
  const TensorView kv_a = Rows(ws.kv_a, 0, t);
  b.Gemm({.a = x, .b = w.kv_a, .out = kv_a, .decode_rows = d});
  const TensorView latent = Rows(ws.latent, 0, t);
  b.RmsNorm({.x = kv_a.Slice(1, 0, r), .weight = w.kv_a_norm, .eps = 1e-6f, .out = latent});
  const TensorView k_pe = kv_a.Slice(1, r, rope);
  const TensorView k_pe_heads(k_pe.data(), DType::kF32, {t, 1, rope}, {k_pe.stride(0), rope, 1});
  b.ApplyRope({.x = q.Slice(2, nope, rope),
               .x2 = k_pe_heads,
               .positions = fb.positions,
               .cos_sin = cos_sin_});
  b.WriteKvCache(
      {.latent = latent, .k_pe = k_pe, .slot_mapping = fb.slot_mapping, .kv_cache = kv_cache});

  // 3. Attention into [t, heads * v], then the output projection.
  const TensorView attn = Rows(ws.attn_out, 0, t);
  if (fb.num_decodes > 0) Decode(w, fb, q, kv_cache, ws, attn);
  if (fb.num_prefill_tokens > 0) Prefill(w, fb, q, kv_a, kv_cache, ws, attn);
  b.Gemm({.a = attn, .b = w.o_proj, .out = out, .decode_rows = d});
}

void MlaAttention::Decode(const LayerWeights& w, const ForwardBatch& fb, const TensorView& q,
                          const TensorView& kv_cache, const MlaWorkspace& ws,
                          const TensorView& attn) const {
  const int64_t d = fb.num_decodes, heads = c_.num_attention_heads, v = c_.v_head_dim;
  const TensorView q_dec = q.Slice(0, 0, d);
  const TensorView q_latent = Rows(ws.q_latent, 0, d);
  // Per head: [d, nope] · W_UKᵀ → [d, kv_lora]; batched over heads via transposed views.
  backend_->Gemm({.a = q_dec.Slice(2, 0, c_.qk_nope_head_dim).Transpose(0, 1),
                  .b = w.w_uk_t,
                  .out = q_latent.Transpose(0, 1),
                  .decode_rows = d});
  const TensorView attn_latent = Rows(ws.attn_latent, 0, d);
  const bool split = !fb.decode_split_items.empty();
  const int64_t split_items = split ? fb.decode_split_items.size(0) : 0;
  backend_->MlaDecode({.q_latent = q_latent,
                       .q_pe = q_dec.Slice(2, c_.qk_nope_head_dim, c_.qk_rope_head_dim),
                       .kv_cache = kv_cache,
                       .block_tables = fb.decode_block_tables,
                       .seq_lens = fb.decode_seq_lens,
                       .softmax_scale = softmax_scale_,
                       .out = attn_latent,
                       .split_offsets = fb.decode_split_offsets,
                       .split_items = fb.decode_split_items,
                       .split_out = split ? Rows(ws.split_out, 0, split_items) : TensorView(),
                       .split_lse = split ? Rows(ws.split_lse, 0, split_items) : TensorView()});
  const TensorView attn_dec = Rows(attn, 0, d).Reshape({d, heads, v});
  backend_->Gemm({.a = attn_latent.Transpose(0, 1),
                  .b = w.w_uv,
                  .out = attn_dec.Transpose(0, 1),
                  .decode_rows = d});
}

void MlaAttention::Prefill(const LayerWeights& w, const ForwardBatch& fb, const TensorView& q,
                           const TensorView& kv_a, const TensorView& kv_cache,
                           const MlaWorkspace& ws, const TensorView& attn) const {
  const int64_t d = fb.num_decodes, p = fb.num_prefill_tokens, heads = c_.num_attention_heads;
  const int64_t r = c_.kv_lora_rank, rope = c_.qk_rope_head_dim, nope = c_.qk_nope_head_dim,
                v = c_.v_head_dim;
  Backend& b = *backend_;
  // Decompressed keys/values viewed per head out of one [n, heads * (nope + v)] GEMM result.
  auto split_kv = [&](const TensorView& kv, int64_t n, TensorView* k_nope, TensorView* values) {
    const int64_t row = heads * (nope + v);
    *k_nope = TensorView(kv.data(), DType::kF32, {n, heads, nope}, {row, nope + v, 1});
    *values = TensorView(kv.ptr<float>() + nope, DType::kF32, {n, heads, v}, {row, nope + v, 1});
  };
  const TensorView q_pre = q.Slice(0, d, p);
  const TensorView out = Rows(attn, d, p).Reshape({p, heads, v});
  const TensorView kv = Rows(ws.kv, 0, p);
  b.Gemm({.a = Rows(ws.latent, d, p), .b = w.kv_b, .out = kv});
  TensorView k_nope, values;
  split_kv(kv, p, &k_nope, &values);
  const TensorView lse = fb.prefill_has_context ? Rows(ws.lse, 0, p) : TensorView();
  b.MlaPrefill({.q = q_pre,
                .k_nope = k_nope,
                .k_pe = Rows(kv_a, d, p).Slice(1, r, rope),
                .v = values,
                .cu_seqlens_q = fb.prefill_cu_seqlens,
                .cu_seqlens_kv = fb.prefill_cu_seqlens,
                .causal = true,
                .softmax_scale = softmax_scale_,
                .out = out,
                .lse = lse});
  // Cached context, in bounded rounds that reuse one workspace.
  const TensorView round_out = Rows(ws.round_out, 0, p), round_lse = Rows(ws.round_lse, 0, p);
  for (const ContextRound& round : fb.context_rounds) {
    const TensorView ctx = Rows(ws.ctx_latent, 0, round.num_tokens);
    b.GatherKvCache({.kv_cache = kv_cache,
                     .block_tables = fb.prefill_block_tables,
                     .cu_seq_lens = round.cu_gather,
                     .seq_starts = round.gather_start,
                     .out = ctx});
    const TensorView ctx_kv = Rows(ws.ctx_kv, 0, round.num_tokens);
    b.Gemm({.a = ctx.Slice(1, 0, r), .b = w.kv_b, .out = ctx_kv});
    split_kv(ctx_kv, round.num_tokens, &k_nope, &values);
    b.MlaPrefill({.q = q_pre,
                  .k_nope = k_nope,
                  .k_pe = ctx.Slice(1, r, rope),
                  .v = values,
                  .cu_seqlens_q = fb.prefill_cu_seqlens,
                  .cu_seqlens_kv = round.cu_gather,
                  .causal = false,
                  .softmax_scale = softmax_scale_,
                  .out = round_out.Reshape({p, heads, v}),
                  .lse = round_lse});
    b.MergeAttn({.out = out, .lse = lse, .suffix_out = round_out.Reshape({p, heads, v}),
                 .suffix_lse = round_lse});
  }
}

}  // namespace mlaserve
