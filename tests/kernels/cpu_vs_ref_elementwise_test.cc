// CpuBackend row-wise ops against the oracle: embedding, RMSNorm, SiLU·mul, add, copy, rope
// and the paged latent cache write and gather, over odd sizes and strided views.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CpuElementwiseTest = CpuVsRefTest;

std::string Label(const char* what, int64_t a, int64_t b) {
  return std::string(what) + " " + std::to_string(a) + "x" + std::to_string(b);
}

TEST_P(CpuElementwiseTest, EmbeddingCopiesRowsExactly) {
  std::mt19937 rng(21);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int64_t tokens : {1, 63, 1000}) {
      const int64_t vocab = 97, hidden = 130;
      TestTensor table = RandomTensor(ref(), rng, dt, {vocab, hidden});
      TestTensor ids = IntTensor(ref(), {tokens}, RandomInts(rng, tokens, 0, vocab - 1));
      TestTensor out_ref(ref(), DType::kF32, {tokens, hidden});
      TestTensor table_cpu = table.CloneTo(cpu()), ids_cpu = ids.CloneTo(cpu());
      TestTensor out_cpu(cpu(), DType::kF32, {tokens, hidden});
      ref().Embedding({.ids = ids.view(), .table = table.view(), .out = out_ref.view()});
      cpu().Embedding({.ids = ids_cpu.view(), .table = table_cpu.view(), .out = out_cpu.view()});
      EXPECT_EQ(out_cpu.Read(), out_ref.Read()) << tokens;
    }
  }
}

TEST_P(CpuElementwiseTest, RmsNormWithAndWithoutResidualOnStridedRows) {
  std::mt19937 rng(22);
  for (int64_t rows : {1, 3, 65, 1000}) {
    for (int64_t dim : {1, 17, 512, 2048}) {
      if (rows * dim > 300000) continue;
      // 0: x alone; 1: x + residual; 2: x + addend (strided) + residual.
      for (int inputs : {0, 1, 2}) {
        const bool residual = inputs >= 1, addend = inputs == 2;
        const int64_t pitch = dim + 3;
        TestTensor x = RandomTensor(ref(), rng, DType::kF32, {rows, pitch}, -3, 3);
        TestTensor res = RandomTensor(ref(), rng, DType::kF32, {rows, dim});
        TestTensor add = RandomTensor(ref(), rng, DType::kF32, {rows, pitch}, -3, 3);
        TestTensor w = RandomTensor(ref(), rng, DType::kBF16, {dim});
        TestTensor x_cpu = x.CloneTo(cpu()), res_cpu = res.CloneTo(cpu()), w_cpu = w.CloneTo(cpu());
        TestTensor add_cpu = add.CloneTo(cpu());
        // out aliases x: the op must read each row before it overwrites it.
        ref().RmsNorm({.x = x.view().Slice(1, 0, dim),
                       .residual = residual ? res.view() : TensorView(),
                       .addend = addend ? add.view().Slice(1, 3, dim) : TensorView(),
                       .weight = w.view(),
                       .eps = 1e-6f,
                       .out = x.view().Slice(1, 0, dim)});
        cpu().RmsNorm({.x = x_cpu.view().Slice(1, 0, dim),
                       .residual = residual ? res_cpu.view() : TensorView(),
                       .addend = addend ? add_cpu.view().Slice(1, 3, dim) : TensorView(),
                       .weight = w_cpu.view(),
                       .eps = 1e-6f,
                       .out = x_cpu.view().Slice(1, 0, dim)});
        ExpectClose(x_cpu.Read(), x.Read(), 1e-6, 1e-5, Label("rmsnorm", rows, dim), x.shape());
        ExpectClose(res_cpu.Read(), res.Read(), 0, 0, Label("residual", rows, dim), res.shape());
      }
    }
  }
}

TEST_P(CpuElementwiseTest, SiluMulAndAdd) {
  std::mt19937 rng(23);
  for (int64_t tokens : {1, 64, 65}) {
    for (int64_t inter : {1, 15, 16, 1408}) {
      TestTensor x = RandomTensor(ref(), rng, DType::kF32, {tokens, 2 * inter}, -12, 12);
      TestTensor out_ref(ref(), DType::kF32, {tokens, inter});
      TestTensor x_cpu = x.CloneTo(cpu());
      TestTensor out_cpu(cpu(), DType::kF32, {tokens, inter});
      ref().SiluMul({.x = x.view(), .out = out_ref.view()});
      cpu().SiluMul({.x = x_cpu.view(), .out = out_cpu.view()});
      ExpectClose(out_cpu.Read(), out_ref.Read(), 1e-6, 1e-5, Label("silu", tokens, inter));
      // out aliases a.
      TestTensor y = RandomTensor(ref(), rng, DType::kF32, {tokens, inter});
      TestTensor y_cpu = y.CloneTo(cpu());
      ref().Add({.a = out_ref.view(), .b = y.view(), .out = out_ref.view()});
      cpu().Add({.a = out_cpu.view(), .b = y_cpu.view(), .out = out_cpu.view()});
      ExpectClose(out_cpu.Read(), out_ref.Read(), 1e-6, 1e-5, Label("add", tokens, inter));
    }
  }
}

TEST_P(CpuElementwiseTest, CopyConvertsAndHonoursStrides) {
  std::mt19937 rng(24);
  const std::vector<std::pair<DType, DType>> pairs = {{DType::kF32, DType::kBF16},
                                                      {DType::kBF16, DType::kF32},
                                                      {DType::kF32, DType::kF32},
                                                      {DType::kBF16, DType::kBF16}};
  for (const auto& [from, to] : pairs) {
    for (bool transpose : {false, true}) {
      const int64_t rows = 33, cols = 65;
      TestTensor src = RandomTensor(ref(), rng, from, {rows, cols});
      TestTensor dst_ref = RandomTensor(ref(), rng, to, {cols + 2, cols + 2});
      TestTensor src_cpu = src.CloneTo(cpu()), dst_cpu = dst_ref.CloneTo(cpu());
      auto dst_view = [&](const TestTensor& t) {
        const TensorView v = t.view().Slice(0, 1, transpose ? cols : rows).Slice(1, 2, transpose ? rows : cols);
        return transpose ? v.Transpose(0, 1) : v;
      };
      ref().Copy({.src = src.view(), .dst = dst_view(dst_ref)});
      cpu().Copy({.src = src_cpu.view(), .dst = dst_view(dst_cpu)});
      EXPECT_EQ(dst_cpu.Read(), dst_ref.Read()) << DTypeName(from) << "->" << DTypeName(to);
    }
  }
  TestTensor ints = IntTensor(ref(), {4, 5, 6}, RandomInts(rng, 120, -1000, 1000));
  TestTensor ints_cpu = ints.CloneTo(cpu());
  TestTensor out_ref(ref(), DType::kI32, {6, 5, 4}), out_cpu(cpu(), DType::kI32, {6, 5, 4});
  ref().Copy({.src = ints.view(), .dst = out_ref.view().Transpose(0, 2)});
  cpu().Copy({.src = ints_cpu.view(), .dst = out_cpu.view().Transpose(0, 2)});
  EXPECT_EQ(out_cpu.ReadInts(), out_ref.ReadInts());
}

TEST_P(CpuElementwiseTest, RopeOverHeadsAndTokens) {
  std::mt19937 rng(25);
  const int64_t rope = 64, nope = 128, max_pos = 2000;
  TestTensor cos_sin = RandomTensor(ref(), rng, DType::kF32, {max_pos, rope});
  TestTensor cos_sin_cpu = cos_sin.CloneTo(cpu());
  for (int64_t heads : {1, 3, 16, 128}) {
    for (int64_t tokens : {1, 63, 64, 65, 1000}) {
      if (tokens == 1000 && heads > 3) continue;
      // The rope part of q: a strided slice after the nope dims.
      TestTensor q = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, nope + rope});
      // The keys' rope part (x2), rotated in the same op on odd token counts: a strided slice
      // of [tokens, 1, latent + rope] as in the model.
      const bool keys = tokens % 2 == 1;
      TestTensor k = RandomTensor(ref(), rng, DType::kF32, {tokens, 1, nope + rope});
      TestTensor pos = IntTensor(ref(), {tokens}, RandomInts(rng, tokens, 0, max_pos - 1));
      TestTensor q_cpu = q.CloneTo(cpu()), pos_cpu = pos.CloneTo(cpu());
      TestTensor k_cpu = k.CloneTo(cpu());
      ref().ApplyRope({.x = q.view().Slice(2, nope, rope),
                       .x2 = keys ? k.view().Slice(2, nope, rope) : TensorView(),
                       .positions = pos.view(),
                       .cos_sin = cos_sin.view()});
      cpu().ApplyRope({.x = q_cpu.view().Slice(2, nope, rope),
                       .x2 = keys ? k_cpu.view().Slice(2, nope, rope) : TensorView(),
                       .positions = pos_cpu.view(),
                       .cos_sin = cos_sin_cpu.view()});
      ExpectClose(q_cpu.Read(), q.Read(), 1e-6, 1e-6, Label("rope", heads, tokens), q.shape());
      ExpectClose(k_cpu.Read(), k.Read(), 1e-6, 1e-6, Label("rope x2", heads, tokens), k.shape());
    }
  }
}

TEST_P(CpuElementwiseTest, KvCacheWriteThenGather) {
  std::mt19937 rng(26);
  const int64_t rank = 512, rope = 64, dim = rank + rope, block_size = 16, blocks = 80;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t tokens : {1, 63, 65, 1000}) {
      // Distinct slots in random order, one in seven skipped as padding.
      std::vector<int32_t> slots = RandomPermutation(rng, blocks * block_size);
      slots.resize(tokens);
      for (int64_t t = 0; t < tokens; t += 7) slots[t] = -1;
      TestTensor latent = RandomTensor(ref(), rng, DType::kF32, {tokens, rank});
      TestTensor k_pe = RandomTensor(ref(), rng, DType::kF32, {tokens, rope});
      TestTensor slot_t = IntTensor(ref(), {tokens}, slots);
      TestTensor cache = RandomTensor(ref(), rng, dt, {blocks, block_size, dim});
      TestTensor latent_cpu = latent.CloneTo(cpu()), k_pe_cpu = k_pe.CloneTo(cpu());
      TestTensor slot_cpu = slot_t.CloneTo(cpu()), cache_cpu = cache.CloneTo(cpu());
      ref().WriteKvCache({.latent = latent.view(), .k_pe = k_pe.view(),
                          .slot_mapping = slot_t.view(), .kv_cache = cache.view()});
      cpu().WriteKvCache({.latent = latent_cpu.view(), .k_pe = k_pe_cpu.view(),
                          .slot_mapping = slot_cpu.view(), .kv_cache = cache_cpu.view()});
      EXPECT_EQ(cache_cpu.Read(), cache.Read()) << DTypeName(dt) << " tokens=" << tokens;

      // Gather two sequences over a shuffled block table, the second from an offset.
      const std::vector<int32_t> table = RandomPermutation(rng, blocks);
      const int32_t len0 = static_cast<int32_t>(tokens % 700 + 1), start1 = 5;
      const std::vector<int32_t> cu = {0, len0, len0 + 40}, starts = {0, start1};
      TestTensor table_t = IntTensor(ref(), {2, blocks / 2}, table);
      TestTensor cu_t = IntTensor(ref(), {3}, cu), starts_t = IntTensor(ref(), {2}, starts);
      TestTensor out_ref(ref(), DType::kF32, {len0 + 40, dim});
      TestTensor table_cpu = table_t.CloneTo(cpu()), cu_cpu = cu_t.CloneTo(cpu());
      TestTensor starts_cpu = starts_t.CloneTo(cpu());
      TestTensor out_cpu(cpu(), DType::kF32, {len0 + 40, dim});
      ref().GatherKvCache({.kv_cache = cache.view(), .block_tables = table_t.view(),
                           .cu_seq_lens = cu_t.view(), .seq_starts = starts_t.view(),
                           .out = out_ref.view()});
      cpu().GatherKvCache({.kv_cache = cache_cpu.view(), .block_tables = table_cpu.view(),
                           .cu_seq_lens = cu_cpu.view(), .seq_starts = starts_cpu.view(),
                           .out = out_cpu.view()});
      EXPECT_EQ(out_cpu.Read(), out_ref.Read()) << DTypeName(dt) << " tokens=" << tokens;
    }
  }
}

MLASERVE_INSTANTIATE_CPU_ISAS(CpuElementwiseTest);

}  // namespace
}  // namespace mlaserve::test
