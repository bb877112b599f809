// GemmArgs::n_repeat, the second column range of one GEMM call (an expert's gate and up
// slices), on every kernel build this processor runs and the AMX build over software tiles:
// against sums in double precision, bit for bit against two calls over the ranges one at a
// time, and without a write outside the two ranges. Every path a call can take: dot products
// (few rows, and the fixed-depth decode rows), the packed micro-kernels and the AMX tiles (packed
// rows, and 8-16 rows by size), with f32 and bf16 weights, f32 and bf16 activations, gathered
// rows and accumulation.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dtype.h"

namespace mlaserve {
namespace {

struct Build {
  std::string name;
  CpuIsa needs;
  const CpuKernels& (*kernels)();
};

void PrintTo(const Build& build, std::ostream* os) { *os << build.name; }

const Build kBuilds[] = {
    {"scalar", CpuIsa::kScalar, &ScalarKernels},
    {"avx2", CpuIsa::kAvx2, &Avx2Kernels},
    {"avx512", CpuIsa::kAvx512, &Avx512Kernels},
    {"avx512_bf16", CpuIsa::kAvx512Bf16, &Avx512Bf16Kernels},
    {"amx_emulated", CpuIsa::kAvx512Bf16, &AmxEmulatedKernels},
    {"amx_bf16", CpuIsa::kAmxBf16, &AmxBf16Kernels},
};

class GemmRangesTest : public ::testing::TestWithParam<Build> {
 protected:
  void SetUp() override {
    if (DetectCpuIsa() < GetParam().needs) GTEST_SKIP() << "this processor cannot run the build";
    kernels_ = &GetParam().kernels();
    scratch_ = static_cast<float*>(std::aligned_alloc(64, kGemmScratchFloats * sizeof(float)));
  }
  void TearDown() override { std::free(scratch_); }

  void Gemm(const GemmArgs& g) { kernels_->gemm(g, scratch_); }

  const CpuKernels* kernels_ = nullptr;
  float* scratch_ = nullptr;
};

struct Case {
  GemmPath path;
  int64_t m;
  bool bf16_weights;
  bool a_bf16;
  bool gathered;
  bool accumulate;
};

TEST_P(GemmRangesTest, RepeatedRangeIsTwoCallsInOne) {
  // k crosses a depth block of every packed kernel; the ranges start and end mid-panel.
  constexpr int64_t kK = 600, kN = 150, kBegin = 7, kEnd = 45, kRepeat = 80;
  const Case cases[] = {
      {GemmPath::kBySize, 3, true, false, false, false},
      {GemmPath::kBySize, 3, true, true, false, false},
      {GemmPath::kBySize, 40, true, false, true, false},
      {GemmPath::kBySize, 40, true, true, false, true},
      {GemmPath::kBySize, 40, false, false, false, false},
      {GemmPath::kBySize, 12, true, false, true, true},   // AMX: the few-row tiles
      {GemmPath::kBySize, 12, true, true, false, false},
      {GemmPath::kFixedDot, 5, true, false, false, false},
      {GemmPath::kFixedDot, 5, true, true, true, false},
      {GemmPath::kPacked, 2, true, false, false, true},
      {GemmPath::kPacked, 33, true, false, true, true},
      {GemmPath::kPacked, 33, true, true, false, false},
      {GemmPath::kPacked, 33, false, false, true, false},
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& c : cases) {
    const int64_t m = c.m, rows = m + 3;  // A has spare rows for the gathered cases
    std::vector<float> a(rows * kK), b32(kN * kK);
    std::vector<uint16_t> b16(kN * kK);
    for (float& x : a) x = u(rng);
    for (int64_t i = 0; i < kN * kK; ++i) {
      b16[i] = F32ToBf16(u(rng));
      b32[i] = c.bf16_weights ? Bf16ToF32(b16[i]) : u(rng);
    }
    std::vector<int32_t> a_rows(m), c_rows(m);
    for (int64_t i = 0; i < m; ++i) {
      a_rows[i] = static_cast<int32_t>((i * 5 + 2) % rows);
      c_rows[i] = static_cast<int32_t>(m - 1 - i);
    }
    std::vector<float> c0(m * kN);
    for (float& x : c0) x = u(rng);

    GemmArgs g;
    g.a = a.data();
    g.lda = kK;
    g.a_rows = c.gathered ? a_rows.data() : nullptr;
    g.b = c.bf16_weights ? static_cast<const void*>(b16.data()) : b32.data();
    g.b_dtype = c.bf16_weights ? DType::kBF16 : DType::kF32;
    g.ldb = kK;
    g.ldc = kN;
    g.c_rows = c.gathered ? c_rows.data() : nullptr;
    g.m = m;
    g.k = kK;
    g.n_begin = kBegin;
    g.n_end = kEnd;
    g.accumulate = c.accumulate;
    g.path = c.path;
    g.a_bf16 = c.a_bf16;

    std::vector<float> one = c0, two = c0;
    g.c = one.data();
    g.n_repeat = kRepeat;
    Gemm(g);
    g.c = two.data();
    g.n_repeat = 0;
    Gemm(g);
    g.n_begin += kRepeat;
    g.n_end += kRepeat;
    Gemm(g);

    const std::string where = GetParam().name + " path " + std::to_string(static_cast<int>(c.path)) +
                              " m " + std::to_string(m) + " bf16 weights " +
                              std::to_string(c.bf16_weights) + " a_bf16 " +
                              std::to_string(c.a_bf16);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t a_row = c.gathered ? a_rows[i] : i, c_row = c.gathered ? c_rows[i] : i;
      for (int64_t j = 0; j < kN; ++j) {
        const float got = one[c_row * kN + j], was = c0[c_row * kN + j];
        ASSERT_EQ(got, two[c_row * kN + j]) << where << " row " << i << " column " << j;
        const bool in = (j >= kBegin && j < kEnd) || (j >= kBegin + kRepeat && j < kEnd + kRepeat);
        if (!in) {
          ASSERT_EQ(got, was) << where << ": column " << j << " is outside both ranges";
          continue;
        }
        double sum = c.accumulate ? was : 0.0, abs_sum = std::abs(sum);
        for (int64_t l = 0; l < kK; ++l) {
          const double x = c.a_bf16 ? RoundToBf16(a[a_row * kK + l]) : a[a_row * kK + l];
          const double t = x * (c.bf16_weights ? Bf16ToF32(b16[j * kK + l]) : b32[j * kK + l]);
          sum += t;
          abs_sum += std::abs(t);
        }
        ASSERT_NEAR(got, sum, (kK + 3) * std::ldexp(abs_sum, -24))
            << where << " row " << i << " column " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Builds, GemmRangesTest, ::testing::ValuesIn(kBuilds),
                         [](const ::testing::TestParamInfo<Build>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mlaserve
