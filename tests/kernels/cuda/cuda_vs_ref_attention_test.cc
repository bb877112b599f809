// CudaBackend MLA attention against the oracle: prefill (causal with and without cached context,
// non-causal, queries that see no key), the log-sum-exp merge, and absorbed decode over a
// shuffled paged cache with one sequence (positions split over threads) and several (whole
// sequences per thread).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaAttentionTest = CudaVsRefTest;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct PrefillCase {
  int64_t heads, nope, rope, v_dim;
  std::vector<int32_t> len_q, len_kv;
  bool causal;
};

std::string Describe(const PrefillCase& c) {
  std::string s = "heads=" + std::to_string(c.heads) + " dims=" + std::to_string(c.nope) + "/" +
                  std::to_string(c.rope) + "/" + std::to_string(c.v_dim) + " q,kv=";
  for (size_t i = 0; i < c.len_q.size(); ++i) {
    s += std::to_string(c.len_q[i]) + "," + std::to_string(c.len_kv[i]) + " ";
  }
  return s + (c.causal ? "causal" : "full");
}

std::vector<int32_t> ExclusiveScan(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu = {0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

TEST_F(CudaAttentionTest, PrefillMatchesRef) {
  std::mt19937 rng(31);
  const std::vector<PrefillCase> cases = {
      {1, 128, 64, 128, {1}, {1}, true},
      {3, 128, 64, 128, {63}, {63}, true},
      {16, 128, 64, 128, {64, 65}, {64, 65}, true},
      {128, 128, 64, 128, {5}, {70}, true},  // chunk with cached context
      {1, 128, 64, 128, {1000}, {1000}, true},
      {3, 5, 4, 7, {65, 3, 40}, {65, 1, 130}, true},  // seq 1: early queries see nothing
      {3, 5, 4, 7, {17, 64}, {33, 1}, false},
      {2, 16, 8, 16, {0, 9}, {4, 9}, true},  // an empty sequence
  };
  for (const PrefillCase& c : cases) {
    const std::vector<int32_t> cu_q = ExclusiveScan(c.len_q), cu_kv = ExclusiveScan(c.len_kv);
    const int64_t num_q = cu_q.back(), num_kv = cu_kv.back(), qk = c.nope + c.rope;
    TestTensor q = RandomTensor(ref(), rng, DType::kF32, {num_q, c.heads, qk}, -2, 2);
    TestTensor k_nope = RandomTensor(ref(), rng, DType::kF32, {num_kv, c.heads, c.nope}, -2, 2);
    TestTensor k_pe = RandomTensor(ref(), rng, DType::kF32, {num_kv, c.rope}, -2, 2);
    TestTensor v = RandomTensor(ref(), rng, DType::kF32, {num_kv, c.heads, c.v_dim});
    TestTensor cu_q_t = IntTensor(ref(), {static_cast<int64_t>(cu_q.size())}, cu_q);
    TestTensor cu_kv_t = IntTensor(ref(), {static_cast<int64_t>(cu_kv.size())}, cu_kv);
    TestTensor out_ref(ref(), DType::kF32, {num_q, c.heads, c.v_dim});
    TestTensor lse_ref(ref(), DType::kF32, {num_q, c.heads});
    TestTensor q_c = q.CloneTo(cuda()), kn_c = k_nope.CloneTo(cuda()), kp_c = k_pe.CloneTo(cuda());
    TestTensor v_c = v.CloneTo(cuda()), cu_q_c = cu_q_t.CloneTo(cuda());
    TestTensor cu_kv_c = cu_kv_t.CloneTo(cuda());
    TestTensor out_cuda(cuda(), DType::kF32, {num_q, c.heads, c.v_dim});
    TestTensor lse_cuda(cuda(), DType::kF32, {num_q, c.heads});
    const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
    ref().MlaPrefill({.q = q.view(),
                      .k_nope = k_nope.view(),
                      .k_pe = k_pe.view(),
                      .v = v.view(),
                      .cu_seqlens_q = cu_q_t.view(),
                      .cu_seqlens_kv = cu_kv_t.view(),
                      .causal = c.causal,
                      .softmax_scale = scale,
                      .out = out_ref.view(),
                      .lse = lse_ref.view()});
    cuda().MlaPrefill({.q = q_c.view(),
                       .k_nope = kn_c.view(),
                       .k_pe = kp_c.view(),
                       .v = v_c.view(),
                       .cu_seqlens_q = cu_q_c.view(),
                       .cu_seqlens_kv = cu_kv_c.view(),
                       .causal = c.causal,
                       .softmax_scale = scale,
                       .out = out_cuda.view(),
                       .lse = lse_cuda.view()});
    ExpectClose(out_cuda.Read(), out_ref.Read(), 2e-5, 1e-4, Describe(c), out_ref.shape());
    ExpectClose(lse_cuda.Read(), lse_ref.Read(), 2e-5, 1e-5, Describe(c), lse_ref.shape());
  }
}

TEST_F(CudaAttentionTest, MergeMatchesRefIncludingInfiniteLse) {
  std::mt19937 rng(32);
  const int64_t tokens = 65, heads = 3, dim = 130;
  std::vector<float> lse = RandomFloats(rng, tokens * heads, -5, 5);
  std::vector<float> suffix_lse = RandomFloats(rng, tokens * heads, -5, 5);
  for (int64_t i = 0; i < tokens * heads; i += 5) lse[i] = -kInf;
  for (int64_t i = 0; i < tokens * heads; i += 7) suffix_lse[i] = -kInf;
  TestTensor out = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, dim});
  TestTensor suffix = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, dim});
  TestTensor lse_t = FloatTensor(ref(), DType::kF32, {tokens, heads}, lse);
  TestTensor suffix_lse_t = FloatTensor(ref(), DType::kF32, {tokens, heads}, suffix_lse);
  TestTensor out_c = out.CloneTo(cuda()), suffix_c = suffix.CloneTo(cuda());
  TestTensor lse_c = lse_t.CloneTo(cuda()), suffix_lse_c = suffix_lse_t.CloneTo(cuda());
  ref().MergeAttn({.out = out.view(),
                   .lse = lse_t.view(),
                   .suffix_out = suffix.view(),
                   .suffix_lse = suffix_lse_t.view()});
  cuda().MergeAttn({.out = out_c.view(),
                    .lse = lse_c.view(),
                    .suffix_out = suffix_c.view(),
                    .suffix_lse = suffix_lse_c.view()});
  ExpectClose(out_c.Read(), out.Read(), 1e-6, 1e-5, "out", out.shape());
  ExpectClose(lse_c.Read(), lse_t.Read(), 1e-6, 1e-6, "lse", lse_t.shape());
}

struct DecodeCase {
  int64_t heads, rank, rope, block_size;
  std::vector<int32_t> lens;
};

TEST_F(CudaAttentionTest, DecodeMatchesRef) {
  std::mt19937 rng(33);
  const std::vector<DecodeCase> cases = {
      {1, 512, 64, 64, {1}},
      {3, 512, 64, 64, {1000}},
      {16, 512, 64, 64, {63}},
      {16, 512, 64, 16, {65, 64}},
      {128, 512, 64, 64, {64}},
      {128, 512, 64, 16, {1, 2, 65}},
      {3, 24, 8, 16, {1000, 1, 63, 64, 65}},
      {16, 24, 8, 5, {7, 13}},
  };
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (const DecodeCase& c : cases) {
      const int64_t seqs = static_cast<int64_t>(c.lens.size()), dim = c.rank + c.rope;
      int64_t max_blocks = 0;
      for (int32_t len : c.lens) {
        max_blocks = std::max<int64_t>(max_blocks, (len + c.block_size - 1) / c.block_size);
      }
      // Every sequence owns max_blocks entries of one shuffled table: unused entries point at
      // real blocks that hold other sequences' data and must not be read.
      const int64_t blocks = seqs * max_blocks;
      TestTensor tables = IntTensor(ref(), {seqs, max_blocks},
                                    RandomPermutation(rng, static_cast<int32_t>(blocks)));
      TestTensor lens = IntTensor(ref(), {seqs}, c.lens);
      TestTensor cache = RandomTensor(ref(), rng, dt, {blocks, c.block_size, dim});
      TestTensor q_latent = RandomTensor(ref(), rng, DType::kF32, {seqs, c.heads, c.rank});
      TestTensor q_pe = RandomTensor(ref(), rng, DType::kF32, {seqs, c.heads, c.rope});
      TestTensor out_ref(ref(), DType::kF32, {seqs, c.heads, c.rank});
      TestTensor tables_c = tables.CloneTo(cuda()), lens_c = lens.CloneTo(cuda());
      TestTensor cache_c = cache.CloneTo(cuda()), q_latent_c = q_latent.CloneTo(cuda());
      TestTensor q_pe_c = q_pe.CloneTo(cuda());
      TestTensor out_cuda(cuda(), DType::kF32, {seqs, c.heads, c.rank});
      const float scale = 0.125f;
      ref().MlaDecode({.q_latent = q_latent.view(),
                       .q_pe = q_pe.view(),
                       .kv_cache = cache.view(),
                       .block_tables = tables.view(),
                       .seq_lens = lens.view(),
                       .softmax_scale = scale,
                       .out = out_ref.view()});
      cuda().MlaDecode({.q_latent = q_latent_c.view(),
                        .q_pe = q_pe_c.view(),
                        .kv_cache = cache_c.view(),
                        .block_tables = tables_c.view(),
                        .seq_lens = lens_c.view(),
                        .softmax_scale = scale,
                        .out = out_cuda.view()});
      ExpectClose(out_cuda.Read(), out_ref.Read(), 2e-5, 1e-4,
                  std::string(DTypeName(dt)) + " heads=" + std::to_string(c.heads) +
                      " seqs=" + std::to_string(seqs) + " block=" + std::to_string(c.block_size),
                  out_ref.shape());
    }
  }
}

}  // namespace
}  // namespace mlaserve::test
