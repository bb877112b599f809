#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

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

struct DecodeCase {
  int64_t heads, rank, rope, block_size;
  std::vector<int32_t> lens;
};

}  // namespace

void ExpectMlaPrefillMatchesRef(const ParityBackends& b) {
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
    TestTensor q = RandomTensor(b.ref, rng, DType::kF32, {num_q, c.heads, qk}, -2, 2);
    TestTensor k_nope = RandomTensor(b.ref, rng, DType::kF32, {num_kv, c.heads, c.nope}, -2, 2);
    TestTensor k_pe = RandomTensor(b.ref, rng, DType::kF32, {num_kv, c.rope}, -2, 2);
    TestTensor v = RandomTensor(b.ref, rng, DType::kF32, {num_kv, c.heads, c.v_dim});
    TestTensor cu_q_t = IntTensor(b.ref, {static_cast<int64_t>(cu_q.size())}, cu_q);
    TestTensor cu_kv_t = IntTensor(b.ref, {static_cast<int64_t>(cu_kv.size())}, cu_kv);
    const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
    auto run = [&](Backend& backend, const TestTensor& q, const TestTensor& k_nope,
                   const TestTensor& k_pe, const TestTensor& v, const TestTensor& cu_q,
                   const TestTensor& cu_kv, const TestTensor& out, const TestTensor& lse) {
      backend.MlaPrefill({.q = q.view(),
                          .k_nope = k_nope.view(),
                          .k_pe = k_pe.view(),
                          .v = v.view(),
                          .cu_seqlens_q = cu_q.view(),
                          .cu_seqlens_kv = cu_kv.view(),
                          .causal = c.causal,
                          .softmax_scale = scale,
                          .out = out.view(),
                          .lse = lse.view()});
    };
    TestTensor out_ref(b.ref, DType::kF32, {num_q, c.heads, c.v_dim});
    TestTensor lse_ref(b.ref, DType::kF32, {num_q, c.heads});
    run(b.ref, q, k_nope, k_pe, v, cu_q_t, cu_kv_t, out_ref, lse_ref);
    TestTensor out_dut(b.dut, DType::kF32, {num_q, c.heads, c.v_dim});
    TestTensor lse_dut(b.dut, DType::kF32, {num_q, c.heads});
    run(b.dut, q.CloneTo(b.dut), k_nope.CloneTo(b.dut), k_pe.CloneTo(b.dut), v.CloneTo(b.dut),
        cu_q_t.CloneTo(b.dut), cu_kv_t.CloneTo(b.dut), out_dut, lse_dut);
    ExpectClose(out_dut.Read(), out_ref.Read(), 2e-5, 1e-4, Describe(c), out_ref.shape());
    ExpectClose(lse_dut.Read(), lse_ref.Read(), 2e-5, 1e-5, Describe(c), lse_ref.shape());
  }
}

void ExpectMergeAttnMatchesRef(const ParityBackends& b) {
  std::mt19937 rng(32);
  const int64_t tokens = 65, heads = 3, dim = 130;
  std::vector<float> lse = RandomFloats(rng, tokens * heads, -5, 5);
  std::vector<float> suffix_lse = RandomFloats(rng, tokens * heads, -5, 5);
  for (int64_t i = 0; i < tokens * heads; i += 5) lse[i] = -kInf;
  for (int64_t i = 0; i < tokens * heads; i += 7) suffix_lse[i] = -kInf;
  TestTensor out = RandomTensor(b.ref, rng, DType::kF32, {tokens, heads, dim});
  TestTensor suffix = RandomTensor(b.ref, rng, DType::kF32, {tokens, heads, dim});
  TestTensor lse_t = FloatTensor(b.ref, DType::kF32, {tokens, heads}, lse);
  TestTensor suffix_lse_t = FloatTensor(b.ref, DType::kF32, {tokens, heads}, suffix_lse);
  TestTensor out_c = out.CloneTo(b.dut), suffix_c = suffix.CloneTo(b.dut);
  TestTensor lse_c = lse_t.CloneTo(b.dut), suffix_lse_c = suffix_lse_t.CloneTo(b.dut);
  b.ref.MergeAttn({.out = out.view(),
                   .lse = lse_t.view(),
                   .suffix_out = suffix.view(),
                   .suffix_lse = suffix_lse_t.view()});
  b.dut.MergeAttn({.out = out_c.view(),
                   .lse = lse_c.view(),
                   .suffix_out = suffix_c.view(),
                   .suffix_lse = suffix_lse_c.view()});
  ExpectClose(out_c.Read(), out.Read(), 1e-6, 1e-5, "out", out.shape());
  ExpectClose(lse_c.Read(), lse_t.Read(), 1e-6, 1e-6, "lse", lse_t.shape());
}

void ExpectMlaDecodeMatchesRef(const ParityBackends& b) {
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
  // Each cache dtype in f32 mode, then in bf16 mode (whose attention stays f32).
  struct Mode {
    DType cache;
    Backend& ref;
    Backend& dut;
  };
  for (const Mode& mode : {Mode{DType::kBF16, b.ref, b.dut}, Mode{DType::kF32, b.ref, b.dut},
                           Mode{DType::kBF16, b.ref_bf16, b.dut_bf16},
                           Mode{DType::kF32, b.ref_bf16, b.dut_bf16}}) {
    const DType dt = mode.cache;
    for (const DecodeCase& c : cases) {
      const int64_t seqs = static_cast<int64_t>(c.lens.size());
      // Every sequence owns max_blocks entries of one shuffled table: unused entries point at
      // real blocks that hold other sequences' data and must not be read.
      const int64_t blocks = seqs * MaxBlocksPerSeq(c.lens, c.block_size);
      const std::vector<int32_t> table = RandomPermutation(rng, static_cast<int32_t>(blocks));
      const MlaDecodeInputs in = MakeMlaDecodeInputs(mode.ref, rng, dt, c.heads, c.rank, c.rope,
                                                     c.block_size, c.lens, table, blocks);
      const MlaDecodeInputs in_dut = in.CloneTo(mode.dut);
      TestTensor out_ref = in.NewOutput(mode.ref), out_dut = in_dut.NewOutput(mode.dut);
      mode.ref.MlaDecode(in.Params(out_ref));
      mode.dut.MlaDecode(in_dut.Params(out_dut));
      ExpectClose(out_dut.Read(), out_ref.Read(), 2e-5, 1e-4,
                  std::string(DTypeName(dt)) + " cache, " +
                      std::string(DTypeName(mode.dut.activation_dtype())) +
                      " activations, heads=" + std::to_string(c.heads) +
                      " seqs=" + std::to_string(seqs) + " block=" + std::to_string(c.block_size),
                  out_ref.shape());
    }
  }
}

MlaDecodeParams MlaDecodeInputs::Params(const TestTensor& out) const {
  return {.q_latent = q_latent.view(),
          .q_pe = q_pe.view(),
          .kv_cache = cache.view(),
          .block_tables = tables.view(),
          .seq_lens = lens.view(),
          .softmax_scale = kSoftmaxScale,
          .out = out.view()};
}

TestTensor MlaDecodeInputs::NewOutput(Backend& backend) const {
  return TestTensor(backend, DType::kF32, q_latent.shape());
}

MlaDecodeInputs MlaDecodeInputs::CloneTo(Backend& backend) const {
  return {tables.CloneTo(backend), lens.CloneTo(backend), cache.CloneTo(backend),
          q_latent.CloneTo(backend), q_pe.CloneTo(backend)};
}

int64_t MaxBlocksPerSeq(std::span<const int32_t> lens, int64_t block_size) {
  int64_t max_blocks = 0;
  for (int32_t len : lens) {
    max_blocks = std::max<int64_t>(max_blocks, (len + block_size - 1) / block_size);
  }
  return max_blocks;
}

MlaDecodeInputs MakeMlaDecodeInputs(Backend& backend, std::mt19937& rng, DType cache_dtype,
                                    int64_t heads, int64_t rank, int64_t rope, int64_t block_size,
                                    std::span<const int32_t> lens, std::span<const int32_t> table,
                                    int64_t blocks) {
  const int64_t seqs = static_cast<int64_t>(lens.size());
  const int64_t max_blocks = static_cast<int64_t>(table.size()) / seqs;
  TestTensor tables = IntTensor(backend, {seqs, max_blocks}, table);
  TestTensor lens_t = IntTensor(backend, {seqs}, lens);
  TestTensor cache = RandomTensor(backend, rng, cache_dtype, {blocks, block_size, rank + rope});
  TestTensor q_latent = RandomTensor(backend, rng, DType::kF32, {seqs, heads, rank});
  TestTensor q_pe = RandomTensor(backend, rng, DType::kF32, {seqs, heads, rope});
  return {std::move(tables), std::move(lens_t), std::move(cache), std::move(q_latent),
          std::move(q_pe)};
}

}  // namespace mlaserve::test
