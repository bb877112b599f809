// CudaBackend row-wise ops against the oracle: embedding, RMSNorm, SiLU·mul, add, copy, rope
// and the paged latent cache write and gather, over the CPU parity tests' odd sizes and strided
// and aliased views (tests/kernels/cpu_vs_ref_elementwise_test.cc).
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaElementwiseTest = CudaVsRefTest;

std::string Label(const char* what, int64_t a, int64_t b) {
  return std::string(what) + " " + std::to_string(a) + "x" + std::to_string(b);
}

TEST_F(CudaElementwiseTest, EmbeddingCopiesRowsExactly) {
  std::mt19937 rng(21);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int64_t tokens : {1, 63, 1000}) {
      const int64_t vocab = 97, hidden = 130;
      TestTensor table = RandomTensor(ref(), rng, dt, {vocab, hidden});
      TestTensor ids = IntTensor(ref(), {tokens}, RandomInts(rng, tokens, 0, vocab - 1));
      TestTensor out_ref(ref(), DType::kF32, {tokens, hidden});
      TestTensor table_gpu = table.CloneTo(cuda()), ids_gpu = ids.CloneTo(cuda());
      TestTensor out_gpu(cuda(), DType::kF32, {tokens, hidden});
      ref().Embedding({.ids = ids.view(), .table = table.view(), .out = out_ref.view()});
      cuda().Embedding({.ids = ids_gpu.view(), .table = table_gpu.view(), .out = out_gpu.view()});
      EXPECT_EQ(out_gpu.Read(), out_ref.Read()) << tokens;
    }
  }
}

TEST_F(CudaElementwiseTest, RmsNormWithAndWithoutResidualOnStridedRows) {
  std::mt19937 rng(22);
  for (int64_t rows : {1, 3, 65, 1000}) {
    for (int64_t dim : {1, 17, 512, 2048}) {
      if (rows * dim > 300000) continue;
      // 0: x alone; 1: x + residual; 2: x + addend (strided) + residual.
      for (int inputs : {0, 1, 2}) {
        const bool residual = inputs >= 1, addend = inputs == 2;
        for (DType wt : {DType::kBF16, DType::kF32}) {
          const int64_t pitch = dim + 3;
          TestTensor x = RandomTensor(ref(), rng, DType::kF32, {rows, pitch}, -3, 3);
          TestTensor res = RandomTensor(ref(), rng, DType::kF32, {rows, dim});
          TestTensor add = RandomTensor(ref(), rng, DType::kF32, {rows, pitch}, -3, 3);
          TestTensor w = RandomTensor(ref(), rng, wt, {dim});
          TestTensor x_gpu = x.CloneTo(cuda()), res_gpu = res.CloneTo(cuda());
          TestTensor add_gpu = add.CloneTo(cuda()), w_gpu = w.CloneTo(cuda());
          // out aliases x: the op must read each row before it overwrites it.
          ref().RmsNorm({.x = x.view().Slice(1, 0, dim),
                         .residual = residual ? res.view() : TensorView(),
                         .addend = addend ? add.view().Slice(1, 3, dim) : TensorView(),
                         .weight = w.view(),
                         .eps = 1e-6f,
                         .out = x.view().Slice(1, 0, dim)});
          cuda().RmsNorm({.x = x_gpu.view().Slice(1, 0, dim),
                          .residual = residual ? res_gpu.view() : TensorView(),
                          .addend = addend ? add_gpu.view().Slice(1, 3, dim) : TensorView(),
                          .weight = w_gpu.view(),
                          .eps = 1e-6f,
                          .out = x_gpu.view().Slice(1, 0, dim)});
          ExpectClose(x_gpu.Read(), x.Read(), 1e-6, 1e-5, Label("rmsnorm", rows, dim), x.shape());
          ExpectClose(res_gpu.Read(), res.Read(), 0, 0, Label("residual", rows, dim),
                      res.shape());
        }
      }
    }
  }
}

TEST_F(CudaElementwiseTest, SiluMulAndAdd) {
  std::mt19937 rng(23);
  for (int64_t tokens : {1, 64, 65}) {
    for (int64_t inter : {1, 15, 16, 1408}) {
      TestTensor x = RandomTensor(ref(), rng, DType::kF32, {tokens, 2 * inter}, -12, 12);
      TestTensor out_ref(ref(), DType::kF32, {tokens, inter});
      TestTensor x_gpu = x.CloneTo(cuda());
      TestTensor out_gpu(cuda(), DType::kF32, {tokens, inter});
      ref().SiluMul({.x = x.view(), .out = out_ref.view()});
      cuda().SiluMul({.x = x_gpu.view(), .out = out_gpu.view()});
      ExpectClose(out_gpu.Read(), out_ref.Read(), 1e-6, 1e-5, Label("silu", tokens, inter));
      // out aliases a; b is a strided column slice.
      TestTensor y = RandomTensor(ref(), rng, DType::kF32, {tokens, inter + 5});
      TestTensor y_gpu = y.CloneTo(cuda());
      ref().Add({.a = out_ref.view(), .b = y.view().Slice(1, 3, inter), .out = out_ref.view()});
      cuda().Add({.a = out_gpu.view(), .b = y_gpu.view().Slice(1, 3, inter),
                  .out = out_gpu.view()});
      ExpectClose(out_gpu.Read(), out_ref.Read(), 1e-6, 1e-5, Label("add", tokens, inter));
    }
  }
}

TEST_F(CudaElementwiseTest, CopyConvertsAndHonoursStrides) {
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
      TestTensor src_gpu = src.CloneTo(cuda()), dst_gpu = dst_ref.CloneTo(cuda());
      auto dst_view = [&](const TestTensor& t) {
        const TensorView v =
            t.view().Slice(0, 1, transpose ? cols : rows).Slice(1, 2, transpose ? rows : cols);
        return transpose ? v.Transpose(0, 1) : v;
      };
      ref().Copy({.src = src.view(), .dst = dst_view(dst_ref)});
      cuda().Copy({.src = src_gpu.view(), .dst = dst_view(dst_gpu)});
      EXPECT_EQ(dst_gpu.Read(), dst_ref.Read()) << DTypeName(from) << "->" << DTypeName(to);
    }
  }
  TestTensor ints = IntTensor(ref(), {4, 5, 6}, RandomInts(rng, 120, -1000, 1000));
  TestTensor ints_gpu = ints.CloneTo(cuda());
  TestTensor out_ref(ref(), DType::kI32, {6, 5, 4}), out_gpu(cuda(), DType::kI32, {6, 5, 4});
  ref().Copy({.src = ints.view(), .dst = out_ref.view().Transpose(0, 2)});
  cuda().Copy({.src = ints_gpu.view(), .dst = out_gpu.view().Transpose(0, 2)});
  EXPECT_EQ(out_gpu.ReadInts(), out_ref.ReadInts());
}

TEST_F(CudaElementwiseTest, RopeOverHeadsAndTokens) {
  std::mt19937 rng(25);
  const int64_t rope = 64, nope = 128, max_pos = 2000;
  TestTensor cos_sin = RandomTensor(ref(), rng, DType::kF32, {max_pos, rope});
  TestTensor cos_sin_gpu = cos_sin.CloneTo(cuda());
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
      TestTensor q_gpu = q.CloneTo(cuda()), pos_gpu = pos.CloneTo(cuda());
      TestTensor k_gpu = k.CloneTo(cuda());
      ref().ApplyRope({.x = q.view().Slice(2, nope, rope),
                       .x2 = keys ? k.view().Slice(2, nope, rope) : TensorView(),
                       .positions = pos.view(),
                       .cos_sin = cos_sin.view()});
      cuda().ApplyRope({.x = q_gpu.view().Slice(2, nope, rope),
                        .x2 = keys ? k_gpu.view().Slice(2, nope, rope) : TensorView(),
                        .positions = pos_gpu.view(),
                        .cos_sin = cos_sin_gpu.view()});
      ExpectClose(q_gpu.Read(), q.Read(), 1e-6, 1e-6, Label("rope", heads, tokens), q.shape());
      ExpectClose(k_gpu.Read(), k.Read(), 1e-6, 1e-6, Label("rope x2", heads, tokens), k.shape());
    }
  }
}

TEST_F(CudaElementwiseTest, KvCacheWriteThenGather) {
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
      TestTensor latent_gpu = latent.CloneTo(cuda()), k_pe_gpu = k_pe.CloneTo(cuda());
      TestTensor slot_gpu = slot_t.CloneTo(cuda()), cache_gpu = cache.CloneTo(cuda());
      ref().WriteKvCache({.latent = latent.view(), .k_pe = k_pe.view(),
                          .slot_mapping = slot_t.view(), .kv_cache = cache.view()});
      cuda().WriteKvCache({.latent = latent_gpu.view(), .k_pe = k_pe_gpu.view(),
                           .slot_mapping = slot_gpu.view(), .kv_cache = cache_gpu.view()});
      EXPECT_EQ(cache_gpu.Read(), cache.Read()) << DTypeName(dt) << " tokens=" << tokens;

      // Gather two sequences over a shuffled block table, the second from an offset, into
      // rows past which the output keeps its contents.
      const std::vector<int32_t> table = RandomPermutation(rng, blocks);
      const int32_t len0 = static_cast<int32_t>(tokens % 700 + 1), start1 = 5;
      const std::vector<int32_t> cu = {0, len0, len0 + 40}, starts = {0, start1};
      TestTensor table_t = IntTensor(ref(), {2, blocks / 2}, table);
      TestTensor cu_t = IntTensor(ref(), {3}, cu), starts_t = IntTensor(ref(), {2}, starts);
      TestTensor out_ref = RandomTensor(ref(), rng, DType::kF32, {len0 + 43, dim});
      TestTensor table_gpu = table_t.CloneTo(cuda()), cu_gpu = cu_t.CloneTo(cuda());
      TestTensor starts_gpu = starts_t.CloneTo(cuda()), out_gpu = out_ref.CloneTo(cuda());
      ref().GatherKvCache({.kv_cache = cache.view(), .block_tables = table_t.view(),
                           .cu_seq_lens = cu_t.view(), .seq_starts = starts_t.view(),
                           .out = out_ref.view()});
      cuda().GatherKvCache({.kv_cache = cache_gpu.view(), .block_tables = table_gpu.view(),
                            .cu_seq_lens = cu_gpu.view(), .seq_starts = starts_gpu.view(),
                            .out = out_gpu.view()});
      EXPECT_EQ(out_gpu.Read(), out_ref.Read()) << DTypeName(dt) << " tokens=" << tokens;
    }
  }
}

}  // namespace
}  // namespace mlaserve::test
