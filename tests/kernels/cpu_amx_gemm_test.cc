// The AMX GEMMs (kernels/cpu/cpu_amx_gemm_impl.h, and cpu_amx_dot_impl.h for calls of a few
// rows and GemmPath::kFixedTiles) against products summed in double precision here: on the software tile model
// (AmxEmulatedKernels, wherever the avx512_bf16 build runs) and on the tile instructions
// (AmxBf16Kernels, only where the processor has AMX and Linux grants it). Shapes cover row,
// pair and column tails of every tile, several depth and row blocks, gathered rows,
// accumulation and column sub-ranges; the f32-activation test proves the three-part split
// carries every bit of A.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dtype.h"

namespace mlaserve {
namespace {

// Parameter: "emulated" or "hardware".
class AmxGemmTest : public ::testing::TestWithParam<std::string> {
 public:
  void Gemm(const GemmArgs& g) { kernels_->gemm(g, scratch_); }

 protected:
  void SetUp() override {
    if (GetParam() == "emulated") {
      if (DetectCpuIsa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "needs AVX512_BF16";
      kernels_ = &AmxEmulatedKernels();
    } else {
      if (DetectCpuIsa() < CpuIsa::kAmxBf16) GTEST_SKIP() << "this processor has no usable AMX";
      kernels_ = &AmxBf16Kernels();
    }
    scratch_ = static_cast<float*>(std::aligned_alloc(64, kGemmScratchFloats * sizeof(float)));
  }
  void TearDown() override { std::free(scratch_); }

  const CpuKernels* kernels_ = nullptr;
  float* scratch_ = nullptr;
};

struct Problem {
  int64_t m, n, k;
  std::vector<float> a;     // [m, k]
  std::vector<uint16_t> b;  // [n, k] bf16
};

Problem MakeProblem(std::mt19937& rng, int64_t m, int64_t n, int64_t k) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Problem p{m, n, k, std::vector<float>(m * k), std::vector<uint16_t>(n * k)};
  for (float& x : p.a) x = u(rng);
  for (uint16_t& x : p.b) x = F32ToBf16(u(rng));
  return p;
}

// Σ_l a[i, l] · b[j, l] in double, with A rounded to bf16 first when `round_a`, and Σ |a · b|.
struct Exact {
  double sum, abs_sum;
};
Exact Dot(const Problem& p, int64_t i, int64_t j, bool round_a) {
  Exact e{0, 0};
  for (int64_t l = 0; l < p.k; ++l) {
    const double a = round_a ? RoundToBf16(p.a[i * p.k + l]) : p.a[i * p.k + l];
    const double t = a * Bf16ToF32(p.b[j * p.k + l]);
    e.sum += t;
    e.abs_sum += std::abs(t);
  }
  return e;
}

// f32 summation of k exact products in any order stays within k·2⁻²⁴·Σ|a·b| of the exact sum.
double Bound(const Exact& e, int64_t k) { return (k + 2) * std::ldexp(e.abs_sum, -24) + 1e-30; }

GemmArgs ArgsFor(const Problem& p, float* c, int64_t ldc) {
  GemmArgs g;
  g.a = p.a.data();
  g.lda = p.k;
  g.b = p.b.data();
  g.b_dtype = DType::kBF16;
  g.ldb = p.k;
  g.c = c;
  g.ldc = ldc;
  g.m = p.m;
  g.k = p.k;
  g.n_begin = 0;
  g.n_end = p.n;
  return g;
}

// Every (m, n, k) of the lists (skipping m > 100 with k > 600, which keeps the software tiles
// fast), both activation dtypes, against sums in double, and no write outside C.
void ExpectExactSums(AmxGemmTest& t, std::initializer_list<int64_t> ms,
                     std::initializer_list<int64_t> ns, std::initializer_list<int64_t> ks,
                     GemmPath path = GemmPath::kBySize) {
  std::mt19937 rng(7);
  for (bool a_bf16 : {false, true}) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          if (m > 100 && k > 600) continue;
          const Problem p = MakeProblem(rng, m, n, k);
          // Two spare columns and one spare row that the call must not touch.
          const int64_t ldc = n + 2;
          std::vector<float> c((m + 1) * ldc, -7.0f);
          GemmArgs g = ArgsFor(p, c.data(), ldc);
          g.a_bf16 = a_bf16;
          g.path = path;
          t.Gemm(g);
          for (int64_t i = 0; i <= m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              const float got = c[i * ldc + j];
              if (i == m || j >= n) {
                ASSERT_EQ(got, -7.0f) << "wrote outside C at " << i << "," << j;
                continue;
              }
              const Exact e = Dot(p, i, j, a_bf16);
              ASSERT_NEAR(got, e.sum, Bound(e, k))
                  << "a_bf16=" << a_bf16 << " m=" << m << " n=" << n << " k=" << k << " at " << i
                  << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST_P(AmxGemmTest, MatchesExactSumsOverTileTails) {
  ExpectExactSums(*this, {17, 32, 33, 47, 300}, {1, 16, 45, 70},
                  {1, 2, 31, 33, 64, 513, 1100});
}

// Calls by size of up to 16 rows: from 8 rows the weights as the tiles' A operand
// (cpu_amx_dot_impl.h), across tile pairs and depth blocks of 2048; fewer on vector dot products.
TEST_P(AmxGemmTest, FewRowsMatchExactSums) {
  ExpectExactSums(*this, {1, 7, 8, 9, 16}, {1, 16, 45, 70},
                  {1, 31, 33, 64, 2049, 4200});
}

// GemmPath::kFixedTiles: any m on the few-row tiles, in chunks of 16 rows and, past 80 rows
// with f32 activations (the chunks the scratch holds packed), in groups of chunks.
TEST_P(AmxGemmTest, FixedTilesMatchExactSums) {
  ExpectExactSums(*this, {1, 3, 16, 17, 40, 81, 97}, {1, 45, 70}, {1, 33, 2049},
                  GemmPath::kFixedTiles);
}

// With f32 activations every bit of A must reach the products. Each a = ±(1 ± 2⁻⁹ ± 2⁻¹⁷) has
// a part in each of hi, mid and lo, B holds ±1 and ±2, and every partial sum of 40 terms is
// a multiple of 2⁻¹⁷ below 2⁷, exact in f32: the result must equal the exact sum bit for bit
// in any summation order, and dropping lo (or mid) would miss it by a multiple of 2⁻¹⁷.
TEST_P(AmxGemmTest, F32ActivationsKeepEveryBit) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> coin(0, 1);
  auto sign = [&] { return coin(rng) != 0 ? 1.0f : -1.0f; };
  Problem p{24, 20, 40, std::vector<float>(24 * 40), std::vector<uint16_t>(20 * 40)};
  for (float& x : p.a) x = sign() * (1.0f + sign() * 0x1p-9f + sign() * 0x1p-17f);
  for (uint16_t& x : p.b) x = F32ToBf16(sign() * static_cast<float>(1 + coin(rng)));
  // All 24 rows packed; the first 12 by size, on the few-row tiles; all 24 on the fixed tiles.
  for (int64_t m : {24, 12, -24}) {
    std::vector<float> c(p.m * p.n);
    GemmArgs g = ArgsFor(p, c.data(), p.n);
    if (m < 0) {
      m = -m;
      g.path = GemmPath::kFixedTiles;
    }
    g.m = m;
    Gemm(g);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        ASSERT_EQ(c[i * p.n + j], Dot(p, i, j, false).sum)
            << "m=" << m << " at " << i << "," << j;
      }
    }
  }
}

// Gathered rows of A and C, accumulation into C, and a column range that starts mid-panel, in a
// call of m rows on `path`.
void ExpectGatheredRowsAccumulate(AmxGemmTest& t, int64_t m, GemmPath path) {
  std::mt19937 rng(9);
  const Problem p = MakeProblem(rng, m, 80, 200);
  std::vector<int32_t> a_rows(p.m), c_rows(p.m);
  for (int64_t i = 0; i < p.m; ++i) {
    a_rows[i] = static_cast<int32_t>((i * 7) % p.m);
    c_rows[i] = static_cast<int32_t>(p.m - 1 - i);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> c(p.m * p.n);
  for (float& x : c) x = u(rng);
  const std::vector<float> before = c;
  GemmArgs g = ArgsFor(p, c.data(), p.n);
  g.a_rows = a_rows.data();
  g.c_rows = c_rows.data();
  g.accumulate = true;
  g.n_begin = 5;
  g.n_end = 71;
  g.path = path;
  t.Gemm(g);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      const float got = c[c_rows[i] * p.n + j];
      const float was = before[c_rows[i] * p.n + j];
      if (j < g.n_begin || j >= g.n_end) {
        ASSERT_EQ(got, was) << "column " << j << " is outside the range";
        continue;
      }
      const Exact e = Dot(p, a_rows[i], j, false);
      ASSERT_NEAR(got, was + e.sum, Bound(e, p.k) + std::ldexp(std::abs(was), -23))
          << "row " << i << " column " << j;
    }
  }
}

TEST_P(AmxGemmTest, GatheredRowsAccumulateIntoColumnRange) {
  // Packed; few-row tiles by size; fixed tiles over three chunks.
  for (auto [m, path] : {std::pair{40, GemmPath::kBySize}, std::pair{12, GemmPath::kBySize},
                         std::pair{40, GemmPath::kFixedTiles}}) {
    SCOPED_TRACE(m);
    ExpectGatheredRowsAccumulate(*this, m, path);
  }
}

// `path` gives a row the same bits whatever rows share the call (batch invariance): each of
// `rows` alone against all m rows in one call, both activation dtypes.
void ExpectRowsIndependent(AmxGemmTest& t, GemmPath path, int64_t m, int64_t k,
                           std::initializer_list<int64_t> rows) {
  std::mt19937 rng(10);
  const Problem p = MakeProblem(rng, m, 50, k);
  for (bool a_bf16 : {false, true}) {
    std::vector<float> all(p.m * p.n);
    GemmArgs g = ArgsFor(p, all.data(), p.n);
    g.path = path;
    g.a_bf16 = a_bf16;
    t.Gemm(g);
    for (int64_t i : rows) {
      std::vector<float> one(p.n);
      GemmArgs single = g;
      single.a = p.a.data() + i * p.k;
      single.c = one.data();
      single.m = 1;
      t.Gemm(single);
      for (int64_t j = 0; j < p.n; ++j) {
        ASSERT_EQ(one[j], all[i * p.n + j])
            << "a_bf16=" << a_bf16 << " row " << i << " column " << j;
      }
    }
  }
}

TEST_P(AmxGemmTest, PackedRowsDoNotDependOnTheirNeighbours) {
  ExpectRowsIndependent(*this, GemmPath::kPacked, 45, 700, {0, 17, 44});
}

// Rows in the first, a middle and the last chunk, and (f32, past 80 rows) the second group of
// chunks, over two depth blocks.
TEST_P(AmxGemmTest, FixedTilesRowsDoNotDependOnTheirNeighbours) {
  ExpectRowsIndependent(*this, GemmPath::kFixedTiles, 90, 2100, {0, 17, 79, 80, 89});
}

INSTANTIATE_TEST_SUITE_P(Tiles, AmxGemmTest, ::testing::Values("emulated", "hardware"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mlaserve
