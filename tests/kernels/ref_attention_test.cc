// The oracle's KV cache and MLA attention ops: hand values, the absorbed-decode ==
// decompressed-prefill identity, and chunked prefill == whole prefill via MergeAttn.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ref/ref_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve {
namespace {

using test::ExpectClose;
using test::FloatTensor;
using test::IntTensor;
using test::RandomFloats;
using test::RandomPermutation;
using test::RoundTo;
using test::TestTensor;

constexpr float kInf = std::numeric_limits<float>::infinity();

class RefAttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = MakeRefBackend();
  Backend& b() { return *backend_; }
};

// A paged layout for sequences of the given lengths: each sequence gets max_blocks entries
// of a shuffled block table; entries past a sequence's length hold -1 (never read).
struct PagedLayout {
  int64_t block_size = 0;
  int64_t max_blocks = 0;
  std::vector<int32_t> block_table;  // [num_seqs, max_blocks]
  int64_t num_blocks() const { return static_cast<int64_t>(block_table.size()); }
  int32_t Slot(int64_t seq, int64_t pos) const {
    return block_table[seq * max_blocks + pos / block_size] * block_size + pos % block_size;
  }
};

PagedLayout MakeLayout(std::mt19937& rng, const std::vector<int64_t>& lens, int64_t block_size,
                       int64_t max_blocks) {
  PagedLayout layout{block_size, max_blocks, {}};
  const int64_t num_blocks = static_cast<int64_t>(lens.size()) * max_blocks;
  const std::vector<int32_t> perm = RandomPermutation(rng, static_cast<int32_t>(num_blocks));
  layout.block_table.assign(perm.begin(), perm.end());
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t k = (lens[s] + block_size - 1) / block_size; k < max_blocks; ++k) {
      layout.block_table[s * max_blocks + k] = -1;
    }
  }
  return layout;
}

TEST_F(RefAttentionTest, WriteThenGatherRoundTripsThroughShuffledBlocks) {
  std::mt19937 rng(11);
  const std::vector<int64_t> lens = {9, 4};
  const int64_t rank = 6, rope = 2, dim = rank + rope, block_size = 4, max_blocks = 3;
  const PagedLayout layout = MakeLayout(rng, lens, block_size, max_blocks);
  for (DType cache_dt : {DType::kF32, DType::kBF16}) {
    // Tokens of both sequences plus one padding token (slot -1) in the middle.
    std::vector<int32_t> slots;
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t pos = 0; pos < lens[s]; ++pos) slots.push_back(layout.Slot(s, pos));
      if (s == 0) slots.push_back(-1);
    }
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const std::vector<float> latent = RandomFloats(rng, tokens * rank);
    const std::vector<float> k_pe = RandomFloats(rng, tokens * rope);
    const std::vector<float> fill(layout.num_blocks() * block_size * dim, 7.0f);
    TestTensor cache = FloatTensor(b(), cache_dt, {layout.num_blocks(), block_size, dim}, fill);
    TestTensor latent_t = FloatTensor(b(), DType::kF32, {tokens, rank}, latent);
    TestTensor k_pe_t = FloatTensor(b(), DType::kF32, {tokens, rope}, k_pe);
    TestTensor slots_t = IntTensor(b(), {tokens}, slots);
    b().WriteKvCache({.latent = latent_t.view(),
                      .k_pe = k_pe_t.view(),
                      .slot_mapping = slots_t.view(),
                      .kv_cache = cache.view()});

    // Gather sequence 0 from position 2 and all of sequence 1.
    const std::vector<int32_t> starts = {2, 0}, cu = {0, 7, 11};
    TestTensor tables = IntTensor(b(), {2, max_blocks}, layout.block_table);
    TestTensor starts_t = IntTensor(b(), {2}, starts);
    TestTensor cu_t = IntTensor(b(), {3}, cu);
    TestTensor out(b(), DType::kF32, {11, dim});
    b().GatherKvCache({.kv_cache = cache.view(),
                       .block_tables = tables.view(),
                       .cu_seq_lens = cu_t.view(),
                       .seq_starts = starts_t.view(),
                       .out = out.view()});
    std::vector<float> expected;
    for (int64_t t : {2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13}) {  // token 9 is the padding
      expected.insert(expected.end(), latent.begin() + t * rank, latent.begin() + (t + 1) * rank);
      expected.insert(expected.end(), k_pe.begin() + t * rope, k_pe.begin() + (t + 1) * rope);
    }
    ExpectClose(out.Read(), RoundTo(cache_dt, expected), 0, 0, DTypeName(cache_dt));

    // Rows no token maps to keep their contents: the padding token wrote nothing.
    const std::vector<float> after = cache.Read();
    int64_t untouched = 0;
    for (int64_t row = 0; row < layout.num_blocks() * block_size; ++row) {
      bool mapped = false;
      for (int32_t slot : slots) mapped = mapped || slot == row;
      if (mapped) continue;
      for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(after[row * dim + c], 7.0f) << "row " << row;
      ++untouched;
    }
    EXPECT_EQ(untouched, layout.num_blocks() * block_size - 13);
  }
}

TEST_F(RefAttentionTest, PrefillHandValuesWithCausalBottomRightMask) {
  // One head, nope 1, rope 1, v 2. Keys: k = (k_nope, k_pe); scores are q·k with scale 0.5.
  // Sequence 0: 2 queries over 3 keys (query 0 sees keys 0..1). Sequence 1: 3 queries over 1
  // key (queries 0 and 1 see nothing).
  const std::vector<float> q = {2, 0, 0, 2, 1, 1, 1, 1, 4, 4};
  const std::vector<float> k_nope = {1, 0, 1, 3}, k_pe = {0, 1, 1, 5};
  const std::vector<float> v = {1, 0, 0, 1, 5, 5, 2, 3};
  TestTensor q_t = FloatTensor(b(), DType::kF32, {5, 1, 2}, q);
  TestTensor kn_t = FloatTensor(b(), DType::kF32, {4, 1, 1}, k_nope);
  TestTensor kp_t = FloatTensor(b(), DType::kF32, {4, 1}, k_pe);
  TestTensor v_t = FloatTensor(b(), DType::kF32, {4, 1, 2}, v);
  TestTensor cu_q = IntTensor(b(), {3}, std::vector<int32_t>{0, 2, 5});
  TestTensor cu_kv = IntTensor(b(), {3}, std::vector<int32_t>{0, 3, 4});
  TestTensor out(b(), DType::kF32, {5, 1, 2});
  TestTensor lse(b(), DType::kF32, {5, 1});
  b().MlaPrefill({.q = q_t.view(),
                  .k_nope = kn_t.view(),
                  .k_pe = kp_t.view(),
                  .v = v_t.view(),
                  .cu_seqlens_q = cu_q.view(),
                  .cu_seqlens_kv = cu_kv.view(),
                  .causal = true,
                  .softmax_scale = 0.5f,
                  .out = out.view(),
                  .lse = lse.view()});
  // Query 0 of seq 0: scores 0.5*(2*1+0*0)=1, 0.5*(2*0+0*1)=0 over keys 0, 1.
  const double e1 = std::exp(1.0), sum0 = e1 + 1;
  // Query 1 of seq 0: scores 0, 1, 1 over keys 0..2 with values (1,0), (0,1), (5,5).
  const double sum1 = 1 + 2 * e1;
  // Query 2 of seq 1: score 0.5*(4*3+4*5)=16 over its single key.
  const std::vector<float> expected_out = {static_cast<float>(e1 / sum0),
                                           static_cast<float>(1 / sum0),
                                           static_cast<float>((1 + 5 * e1) / sum1),
                                           static_cast<float>(6 * e1 / sum1),
                                           0,
                                           0,
                                           0,
                                           0,
                                           2,
                                           3};
  const std::vector<float> expected_lse = {static_cast<float>(std::log(sum0)),
                                           static_cast<float>(std::log(sum1)), -kInf, -kInf, 16};
  ExpectClose(out.Read(), expected_out, 1e-7, 1e-6, "out");
  ExpectClose(lse.Read(), expected_lse, 1e-7, 1e-6, "lse");
}

// A side with lse = -inf has no keys: whatever its out holds (9 here) must not leak in.
TEST_F(RefAttentionTest, MergeHandlesInfiniteLseOnEitherSide) {
  const float half_log2 = 0.5f + std::log(2.0f);
  TestTensor out =
      FloatTensor(b(), DType::kF32, {4, 1, 2}, std::vector<float>{1, 2, 9, 9, 1, 2, 9, 9});
  TestTensor lse =
      FloatTensor(b(), DType::kF32, {4, 1}, std::vector<float>{0.5f, -kInf, 0.5f, -kInf});
  TestTensor s_out =
      FloatTensor(b(), DType::kF32, {4, 1, 2}, std::vector<float>{9, 9, 3, 4, 3, 4, 9, 9});
  TestTensor s_lse =
      FloatTensor(b(), DType::kF32, {4, 1}, std::vector<float>{-kInf, 0.5f, 0.5f, -kInf});
  b().MergeAttn({.out = out.view(),
                 .lse = lse.view(),
                 .suffix_out = s_out.view(),
                 .suffix_lse = s_lse.view()});
  ExpectClose(out.Read(), std::vector<float>{1, 2, 3, 4, 2, 3, 0, 0}, 0, 1e-6, "out");
  ExpectClose(lse.Read(), std::vector<float>{0.5f, 0.5f, half_log2, -kInf}, 0, 1e-6, "lse");
}

// Σ_i a[i] · b[i] over n elements in double.
double Dot(const float* a, const float* b, int64_t n, int64_t b_stride = 1) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i * b_stride];
  return acc;
}

// The heart of MLA: attention over the latent cache with W_UK absorbed into the query and W_UV
// applied after attention equals ordinary attention over keys and values decompressed from the
// latent (k_nope = W_UK·c, v = W_UV·c per head).
TEST_F(RefAttentionTest, AbsorbedDecodeEqualsDecompressedPrefill) {
  std::mt19937 rng(12);
  const std::vector<int64_t> lens = {1, 13, 32, 7};
  const int64_t seqs = 4, heads = 3, rank = 16, nope = 8, rope = 4, v_dim = 6;
  const int64_t block_size = 8, max_blocks = 5, total = 53;
  const float scale = 0.3f;
  const std::vector<float> w_uk = RandomFloats(rng, heads * nope * rank);   // [H, nope, rank]
  const std::vector<float> w_uv = RandomFloats(rng, heads * v_dim * rank);  // [H, v_dim, rank]
  const std::vector<float> q_nope = RandomFloats(rng, seqs * heads * nope, -2, 2);
  const std::vector<float> q_pe = RandomFloats(rng, seqs * heads * rope, -2, 2);
  const std::vector<float> latent = RandomFloats(rng, total * rank, -2, 2);
  const std::vector<float> k_pe = RandomFloats(rng, total * rope, -2, 2);
  for (DType cache_dt : {DType::kF32, DType::kBF16}) {
    const PagedLayout layout = MakeLayout(rng, lens, block_size, max_blocks);
    std::vector<int32_t> slots;
    std::vector<int32_t> cu_kv = {0};
    for (int64_t s = 0; s < seqs; ++s) {
      for (int64_t pos = 0; pos < lens[s]; ++pos) slots.push_back(layout.Slot(s, pos));
      cu_kv.push_back(cu_kv.back() + static_cast<int32_t>(lens[s]));
    }
    TestTensor cache(b(), cache_dt, {layout.num_blocks(), block_size, rank + rope});
    TestTensor latent_t = FloatTensor(b(), DType::kF32, {total, rank}, latent);
    TestTensor k_pe_t = FloatTensor(b(), DType::kF32, {total, rope}, k_pe);
    TestTensor slots_t = IntTensor(b(), {total}, slots);
    b().WriteKvCache({.latent = latent_t.view(),
                      .k_pe = k_pe_t.view(),
                      .slot_mapping = slots_t.view(),
                      .kv_cache = cache.view()});

    // Decode path: q_latent[s, h] = q_nope[s, h] · W_UK[h]; out · W_UV[h]ᵀ afterwards.
    std::vector<float> q_latent(seqs * heads * rank);
    for (int64_t sh = 0; sh < seqs * heads; ++sh) {
      for (int64_t r = 0; r < rank; ++r) {
        q_latent[sh * rank + r] = static_cast<float>(
            Dot(&q_nope[sh * nope], &w_uk[(sh % heads) * nope * rank + r], nope, rank));
      }
    }
    TestTensor q_lat_t = FloatTensor(b(), DType::kF32, {seqs, heads, rank}, q_latent);
    TestTensor q_pe_t = FloatTensor(b(), DType::kF32, {seqs, heads, rope}, q_pe);
    TestTensor tables = IntTensor(b(), {seqs, max_blocks}, layout.block_table);
    std::vector<int32_t> lens32(lens.begin(), lens.end());
    TestTensor lens_t = IntTensor(b(), {seqs}, lens32);
    TestTensor out_latent(b(), DType::kF32, {seqs, heads, rank});
    b().MlaDecode({.q_latent = q_lat_t.view(),
                   .q_pe = q_pe_t.view(),
                   .kv_cache = cache.view(),
                   .block_tables = tables.view(),
                   .seq_lens = lens_t.view(),
                   .softmax_scale = scale,
                   .out = out_latent.view()});
    const std::vector<float> o = out_latent.Read();
    std::vector<float> absorbed(seqs * heads * v_dim);
    for (int64_t sh = 0; sh < seqs * heads; ++sh) {
      for (int64_t d = 0; d < v_dim; ++d) {
        absorbed[sh * v_dim + d] =
            static_cast<float>(Dot(&o[sh * rank], &w_uv[((sh % heads) * v_dim + d) * rank], rank));
      }
    }

    // Prefill path over what the cache holds (bf16-rounded latents for a bf16 cache).
    const std::vector<float> c = RoundTo(cache_dt, latent), pe = RoundTo(cache_dt, k_pe);
    std::vector<float> q(seqs * heads * (nope + rope)), k_nope(total * heads * nope),
        v(total * heads * v_dim);
    for (int64_t sh = 0; sh < seqs * heads; ++sh) {
      for (int64_t d = 0; d < nope; ++d) q[sh * (nope + rope) + d] = q_nope[sh * nope + d];
      for (int64_t d = 0; d < rope; ++d) q[sh * (nope + rope) + nope + d] = q_pe[sh * rope + d];
    }
    for (int64_t j = 0; j < total; ++j) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < nope; ++d) {
          k_nope[(j * heads + h) * nope + d] =
              static_cast<float>(Dot(&c[j * rank], &w_uk[(h * nope + d) * rank], rank));
        }
        for (int64_t d = 0; d < v_dim; ++d) {
          v[(j * heads + h) * v_dim + d] =
              static_cast<float>(Dot(&c[j * rank], &w_uv[(h * v_dim + d) * rank], rank));
        }
      }
    }
    TestTensor q_t = FloatTensor(b(), DType::kF32, {seqs, heads, nope + rope}, q);
    TestTensor kn_t = FloatTensor(b(), DType::kF32, {total, heads, nope}, k_nope);
    TestTensor kp_t = FloatTensor(b(), DType::kF32, {total, rope}, pe);
    TestTensor v_t = FloatTensor(b(), DType::kF32, {total, heads, v_dim}, v);
    TestTensor cu_q_t = IntTensor(b(), {seqs + 1}, std::vector<int32_t>{0, 1, 2, 3, 4});
    TestTensor cu_kv_t = IntTensor(b(), {seqs + 1}, cu_kv);
    TestTensor out(b(), DType::kF32, {seqs, heads, v_dim});
    b().MlaPrefill({.q = q_t.view(),
                    .k_nope = kn_t.view(),
                    .k_pe = kp_t.view(),
                    .v = v_t.view(),
                    .cu_seqlens_q = cu_q_t.view(),
                    .cu_seqlens_kv = cu_kv_t.view(),
                    .causal = true,
                    .softmax_scale = scale,
                    .out = out.view(),
                    .lse = {}});
    ExpectClose(absorbed, out.Read(), 1e-5, 1e-4, DTypeName(cache_dt), out.shape());
  }
}

// Prefill of new tokens over [cached context ‖ new tokens] equals the merge of a non-causal
// pass over the context and a causal pass over the new tokens, as the engine runs it. The
// second sequence has no context, so its first chunk has lse = -inf.
TEST_F(RefAttentionTest, ChunkedPrefillMergedEqualsWholePrefill) {
  std::mt19937 rng(13);
  const std::vector<int32_t> ctx = {7, 0}, fresh = {5, 4};
  const int64_t heads = 2, nope = 8, rope = 4, v_dim = 5, num_q = 9, num_kv = 16;
  const int64_t kd = heads * nope, vd = heads * v_dim;
  const std::vector<float> q = RandomFloats(rng, num_q * heads * (nope + rope), -2, 2);
  // Keys in whole-prefill order: ctx0, fresh0, fresh1.
  const std::vector<float> k_nope = RandomFloats(rng, num_kv * kd, -2, 2);
  const std::vector<float> k_pe = RandomFloats(rng, num_kv * rope, -2, 2);
  const std::vector<float> v = RandomFloats(rng, num_kv * vd, -2, 2);
  auto rows = [](const std::vector<float>& x, int64_t width, int64_t begin, int64_t end) {
    return std::vector<float>(x.begin() + begin * width, x.begin() + end * width);
  };
  auto run = [&](int64_t kv_begin, int64_t kv_end, std::vector<int32_t> cu_kv, bool causal,
                 TestTensor& out, TestTensor& lse) {
    const int64_t n = kv_end - kv_begin;
    TestTensor q_t = FloatTensor(b(), DType::kF32, {num_q, heads, nope + rope}, q);
    TestTensor kn_t =
        FloatTensor(b(), DType::kF32, {n, heads, nope}, rows(k_nope, kd, kv_begin, kv_end));
    TestTensor kp_t = FloatTensor(b(), DType::kF32, {n, rope}, rows(k_pe, rope, kv_begin, kv_end));
    TestTensor v_t =
        FloatTensor(b(), DType::kF32, {n, heads, v_dim}, rows(v, vd, kv_begin, kv_end));
    TestTensor cu_q_t = IntTensor(b(), {3}, std::vector<int32_t>{0, fresh[0], fresh[0] + fresh[1]});
    TestTensor cu_kv_t = IntTensor(b(), {3}, cu_kv);
    b().MlaPrefill({.q = q_t.view(),
                    .k_nope = kn_t.view(),
                    .k_pe = kp_t.view(),
                    .v = v_t.view(),
                    .cu_seqlens_q = cu_q_t.view(),
                    .cu_seqlens_kv = cu_kv_t.view(),
                    .causal = causal,
                    .softmax_scale = 0.4f,
                    .out = out.view(),
                    .lse = lse.view()});
  };
  TestTensor whole_out(b(), DType::kF32, {num_q, heads, v_dim}),
      whole_lse(b(), DType::kF32, {num_q, heads});
  run(0, num_kv, {0, ctx[0] + fresh[0], num_kv}, true, whole_out, whole_lse);
  TestTensor ctx_out(b(), DType::kF32, {num_q, heads, v_dim}),
      ctx_lse(b(), DType::kF32, {num_q, heads});
  run(0, ctx[0], {0, ctx[0], ctx[0]}, false, ctx_out, ctx_lse);
  TestTensor new_out(b(), DType::kF32, {num_q, heads, v_dim}),
      new_lse(b(), DType::kF32, {num_q, heads});
  run(ctx[0], num_kv, {0, fresh[0], fresh[0] + fresh[1]}, true, new_out, new_lse);

  const std::vector<float> ctx_lse_values = ctx_lse.Read();
  for (int64_t i = fresh[0] * heads; i < num_q * heads; ++i) EXPECT_EQ(ctx_lse_values[i], -kInf);
  b().MergeAttn({.out = ctx_out.view(),
                 .lse = ctx_lse.view(),
                 .suffix_out = new_out.view(),
                 .suffix_lse = new_lse.view()});
  ExpectClose(ctx_out.Read(), whole_out.Read(), 1e-6, 1e-5, "out", whole_out.shape());
  ExpectClose(ctx_lse.Read(), whole_lse.Read(), 1e-6, 1e-6, "lse", whole_lse.shape());
}

}  // namespace
}  // namespace mlaserve
