// The oracle's dense ops against hand-computed values and independent double-precision loops.
#include "kernels/ref/ref_backend.h"

#include <cmath>
#include <complex>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve {
namespace {

using test::ExpectClose;
using test::FloatTensor;
using test::IntTensor;
using test::RandomTensor;
using test::TestTensor;

class RefBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = MakeRefBackend();
  Backend& b() { return *backend_; }
};

TEST_F(RefBackendTest, NameIsRef) { EXPECT_EQ(b().name(), "ref"); }

TEST_F(RefBackendTest, EmbeddingGathersBf16Rows) {
  TestTensor table = FloatTensor(b(), DType::kBF16, {3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  TestTensor ids = IntTensor(b(), {4}, std::vector<int32_t>{2, 0, 2, 1});
  TestTensor out(b(), DType::kF32, {4, 2});
  b().Embedding({.ids = ids.view(), .table = table.view(), .out = out.view()});
  EXPECT_EQ(out.Read(), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
}

TEST_F(RefBackendTest, RmsNormAppliesWeightAfterNormalising) {
  // Row 0 has rms 2 and row 1 rms 3, so out = ±weight; eps shifts row 2 from rms 1 to rms 2.
  TestTensor x = FloatTensor(b(), DType::kF32, {3, 4},
                             std::vector<float>{2, 2, 2, 2, 3, -3, 3, -3, 1, 1, 1, 1});
  TestTensor w = FloatTensor(b(), DType::kBF16, {4}, std::vector<float>{1, 0.5f, 2, -1});
  TestTensor out(b(), DType::kF32, {3, 4});
  b().RmsNorm({.x = x.view().Slice(0, 0, 2),
               .residual = {},
               .weight = w.view(),
               .eps = 0.0f,
               .out = out.view().Slice(0, 0, 2)});
  b().RmsNorm({.x = x.view().Slice(0, 2, 1),
               .residual = {},
               .weight = w.view(),
               .eps = 3.0f,
               .out = out.view().Slice(0, 2, 1)});
  EXPECT_EQ(out.Read(),
            (std::vector<float>{1, 0.5f, 2, -1, 1, -0.5f, 2, 1, 0.5f, 0.25f, 1, -0.5f}));
}

TEST_F(RefBackendTest, RmsNormAddsResidualInPlaceAndMayAliasX) {
  TestTensor x = FloatTensor(b(), DType::kF32, {1, 4}, std::vector<float>{1, 3, 1, 3});
  TestTensor residual = FloatTensor(b(), DType::kF32, {1, 4}, std::vector<float>{1, -1, 1, -1});
  TestTensor w = FloatTensor(b(), DType::kF32, {4}, std::vector<float>{1, 2, 3, 4});
  b().RmsNorm({.x = x.view(),
               .residual = residual.view(),
               .weight = w.view(),
               .eps = 0.0f,
               .out = x.view()});
  EXPECT_EQ(residual.Read(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(x.Read(), (std::vector<float>{1, 2, 3, 4}));
}

// x + addend is rounded to f32 before the residual is added, as a separate Add would round it:
// 2^24 + 1 rounds to 2^24 (ties to even) and 2^24 + 1 again does, where 2^24 + (1 + 1) would
// give 2^24 + 2.
TEST_F(RefBackendTest, RmsNormAddsTheAddendToXBeforeTheResidual) {
  constexpr float kBig = 16777216.0f;  // 2^24
  TestTensor x = FloatTensor(b(), DType::kF32, {2, 2}, std::vector<float>{kBig, 3, 1, 3});
  TestTensor addend = FloatTensor(b(), DType::kF32, {2, 2}, std::vector<float>{1, -1, 0.5f, -1});
  TestTensor residual = FloatTensor(b(), DType::kF32, {2, 2}, std::vector<float>{1, 0, 0.5f, 0});
  TestTensor w = FloatTensor(b(), DType::kF32, {2}, std::vector<float>{1, 2});
  TestTensor out(b(), DType::kF32, {2, 2});
  b().RmsNorm({.x = x.view(),
               .residual = residual.view(),
               .addend = addend.view(),
               .weight = w.view(),
               .eps = 0.0f,
               .out = out.view()});
  EXPECT_EQ(residual.Read(), (std::vector<float>{kBig, 2, 2, 2}));
  const std::vector<float> normed = out.Read();
  // Row 0: [2^24, 2] over rms sqrt((2^48 + 4) / 2); row 1: [2, 2] over rms 2, times [1, 2].
  const double rms0 = std::sqrt((static_cast<double>(kBig) * kBig + 4.0) / 2.0);
  EXPECT_FLOAT_EQ(normed[0], static_cast<float>(kBig / rms0));
  EXPECT_FLOAT_EQ(normed[1], static_cast<float>(2.0 / rms0 * 2.0));
  EXPECT_EQ(normed[2], 1.0f);
  EXPECT_EQ(normed[3], 2.0f);
}

TEST_F(RefBackendTest, RmsNormMatchesFormulaOnStridedRows) {
  std::mt19937 rng(1);
  const int64_t rows = 5, dim = 37, pitch = 41;
  TestTensor x = RandomTensor(b(), rng, DType::kF32, {rows, pitch}, -3, 3);
  TestTensor w = RandomTensor(b(), rng, DType::kBF16, {dim});
  TestTensor out(b(), DType::kF32, {rows, dim});
  const float eps = 1e-5f;
  b().RmsNorm({.x = x.view().Slice(1, 0, dim),
               .residual = {},
               .weight = w.view(),
               .eps = eps,
               .out = out.view()});
  const std::vector<float> xs = x.Read(), ws = w.Read();
  std::vector<float> expected;
  for (int64_t r = 0; r < rows; ++r) {
    long double ss = 0;
    for (int64_t i = 0; i < dim; ++i)
      ss += static_cast<long double>(xs[r * pitch + i]) * xs[r * pitch + i];
    const long double rms = std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i)
      expected.push_back(static_cast<float>(xs[r * pitch + i] / rms * ws[i]));
  }
  ExpectClose(out.Read(), expected, 0, 1e-6, "rmsnorm", out.shape());
}

TEST_F(RefBackendTest, GemmHandValues) {
  TestTensor a = FloatTensor(b(), DType::kF32, {2, 2}, std::vector<float>{1, 2, 3, 4});
  TestTensor w = FloatTensor(b(), DType::kBF16, {3, 2}, std::vector<float>{5, 6, 7, 8, 1, 0});
  TestTensor out(b(), DType::kF32, {2, 3});
  b().Gemm({.a = a.view(), .b = w.view(), .out = out.view()});
  EXPECT_EQ(out.Read(), (std::vector<float>{17, 23, 1, 39, 53, 3}));
}

// Batched, strided views on both inputs and the output; the gaps of `out` must be untouched.
TEST_F(RefBackendTest, GemmMatchesNaiveLoopOnStridedBatches) {
  std::mt19937 rng(2);
  const int64_t batch = 3, m = 5, n = 7, k = 19;
  for (DType wdt : {DType::kF32, DType::kBF16}) {
    TestTensor a = RandomTensor(b(), rng, DType::kF32, {batch, m + 1, k + 3});
    TestTensor w = RandomTensor(b(), rng, wdt, {batch, n, k + 2});
    TestTensor out = FloatTensor(b(), DType::kF32, {batch, m, n + 2},
                                 std::vector<float>(batch * m * (n + 2), 42.0f));
    b().Gemm({.a = a.view().Slice(1, 1, m).Slice(2, 0, k),
              .b = w.view().Slice(2, 2, k),
              .out = out.view().Slice(2, 1, n)});
    const std::vector<float> as = a.Read(), ws = w.Read(), got = out.Read();
    std::vector<float> actual, expected;
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n + 2; ++j) {
          const float v = got[(bi * m + i) * (n + 2) + j];
          if (j == 0 || j == n + 1) {
            EXPECT_EQ(v, 42.0f) << "wrote outside out at " << bi << "," << i << "," << j;
            continue;
          }
          double acc = 0;
          for (int64_t l = 0; l < k; ++l) {
            acc += static_cast<double>(as[(bi * (m + 1) + i + 1) * (k + 3) + l]) *
                   ws[(bi * n + j - 1) * (k + 2) + 2 + l];
          }
          actual.push_back(v);
          expected.push_back(static_cast<float>(acc));
        }
      }
    }
    ExpectClose(actual, expected, 1e-6, 1e-6, DTypeName(wdt));
  }
}

TEST_F(RefBackendTest, SiluMulAndAdd) {
  TestTensor x = FloatTensor(b(), DType::kF32, {2, 4}, std::vector<float>{0, 1, 3, 2, -2, 5, 1, 4});
  TestTensor act(b(), DType::kF32, {2, 2});
  b().SiluMul({.x = x.view(), .out = act.view()});
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  ExpectClose(act.Read(),
              std::vector<float>{0.0f, static_cast<float>(silu(1) * 2),
                                 static_cast<float>(silu(-2) * 1), static_cast<float>(silu(5) * 4)},
              0, 1e-7, "silu_mul");
  TestTensor y = FloatTensor(b(), DType::kF32, {2, 2}, std::vector<float>{10, 20, 30, 40});
  b().Add({.a = act.view(), .b = y.view(), .out = act.view()});
  const std::vector<float> sums = act.Read();
  EXPECT_FLOAT_EQ(sums[0], 10.0f);
  EXPECT_FLOAT_EQ(sums[3], static_cast<float>(silu(5) * 4 + 40));
}

TEST_F(RefBackendTest, CopyRoundsToNearestEvenBf16) {
  const float tie_down = 1.0f + std::ldexp(1.0f, -8);    // halfway, even neighbour is 1
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);  // halfway, even neighbour is 1+2^-6
  const float above = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20);
  TestTensor src =
      FloatTensor(b(), DType::kF32, {4}, std::vector<float>{tie_down, tie_up, above, -2.5f});
  TestTensor dst(b(), DType::kBF16, {4});
  b().Copy({.src = src.view(), .dst = dst.view()});
  EXPECT_EQ(dst.Read(), (std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6),
                                            1.0f + std::ldexp(1.0f, -7), -2.5f}));
  TestTensor back(b(), DType::kF32, {4});
  b().Copy({.src = dst.view(), .dst = back.view()});
  EXPECT_EQ(back.Read(), dst.Read());
}

TEST_F(RefBackendTest, CopyHonoursStrides) {
  TestTensor src = IntTensor(b(), {2, 3}, std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  TestTensor dst = IntTensor(b(), {3, 4}, std::vector<int32_t>(12, 0));
  // Writes the 2x3 source into columns 1..2 of a 3x4 destination, transposed.
  b().Copy({.src = src.view(), .dst = dst.view().Slice(1, 1, 2).Transpose(0, 1)});
  EXPECT_EQ(dst.ReadInts(), (std::vector<int32_t>{0, 1, 4, 0, 0, 2, 5, 0, 0, 3, 6, 0}));
}

// Rope as HF writes it: de-interleave, then x·cos + rotate_half(x)·sin, equivalently the complex
// product (x[2i] + i·x[2i+1]) · mscale·e^{iθ} stored as real parts then imaginary parts; x2
// (here two key heads) is rotated by the same positions.
TEST_F(RefBackendTest, RopeMatchesComplexRotationOnStridedHeads) {
  std::mt19937 rng(3);
  const int64_t tokens = 4, heads = 3, nope = 5, rope = 8, half = rope / 2, max_pos = 16;
  const double base = 10000.0, mscale = 1.25;
  std::vector<float> table(max_pos * rope);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const std::complex<double> r = std::polar(mscale, p * std::pow(base, -2.0 * i / rope));
      table[p * rope + i] = static_cast<float>(r.real());
      table[p * rope + half + i] = static_cast<float>(r.imag());
    }
  }
  TestTensor cos_sin = FloatTensor(b(), DType::kF32, {max_pos, rope}, table);
  const std::vector<int32_t> positions = {7, 0, 15, 3};
  TestTensor pos = IntTensor(b(), {tokens}, positions);
  constexpr int64_t kKeyHeads = 2;
  TestTensor q = RandomTensor(b(), rng, DType::kF32, {tokens, heads, nope + rope});
  TestTensor k = RandomTensor(b(), rng, DType::kF32, {tokens, kKeyHeads, nope + rope});
  // What the rotation makes of `values` ([tokens, n, nope + rope], the rope part last).
  auto rotated = [&](std::vector<float> values, int64_t n) {
    const std::vector<float> before = values;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < n; ++h) {
        float* head = &values[(t * n + h) * (nope + rope) + nope];
        const float* x = &before[(t * n + h) * (nope + rope) + nope];
        for (int64_t i = 0; i < half; ++i) {
          const std::complex<double> z(x[2 * i], x[2 * i + 1]);
          const std::complex<double> r(table[positions[t] * rope + i],
                                       table[positions[t] * rope + half + i]);
          head[i] = static_cast<float>((z * r).real());
          head[half + i] = static_cast<float>((z * r).imag());
        }
      }
    }
    return values;
  };
  const std::vector<float> q_expected = rotated(q.Read(), heads);
  const std::vector<float> k_expected = rotated(k.Read(), kKeyHeads);
  b().ApplyRope({.x = q.view().Slice(2, nope, rope),
                 .x2 = k.view().Slice(2, nope, rope),
                 .positions = pos.view(),
                 .cos_sin = cos_sin.view()});
  ExpectClose(q.Read(), q_expected, 1e-6, 1e-6, "rope", q.shape());
  ExpectClose(k.Read(), k_expected, 1e-6, 1e-6, "rope x2", k.shape());
}

TEST(RefBackendDeathTest, ShapeMismatchAborts) {
  std::unique_ptr<Backend> backend = MakeRefBackend();
  TestTensor a(*backend, DType::kF32, {2, 3});
  TestTensor w(*backend, DType::kF32, {4, 5});
  TestTensor out(*backend, DType::kF32, {2, 4});
  EXPECT_DEATH(backend->Gemm({.a = a.view(), .b = w.view(), .out = out.view()}), "Gemm.b");
}

}  // namespace
}  // namespace mlaserve
