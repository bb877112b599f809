// CpuBackend Gemm against the oracle: every row count of the dispatch (dot-product path up to 16
// rows, packed micro-kernels beyond, several row blocks past 512), odd and even n and k around
// the panel and depth blocking, bf16 and f32 weights, strided and batched views.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CpuGemmTest = CpuVsRefTest;

// Accumulation-order error grows like sqrt(k) for random data; this bound leaves a wide margin
// over f32 rounding while catching a wrong or missing product term.
double Atol(int64_t k) { return 2e-6 * std::sqrt(static_cast<double>(k) + 1.0) * 8; }

TEST_P(CpuGemmTest, MatchesRefOverShapeGrid) {
  std::mt19937 rng(11);
  struct NK {
    int64_t n, k;
  };
  const std::vector<NK> shapes = {{1, 1},   {3, 5},    {16, 16},  {33, 47},
                                  {64, 300}, {130, 257}, {257, 520}};
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (int64_t m : {1, 2, 3, 7, 8, 9, 16, 17, 64, 65, 300, 512, 700}) {
      for (const NK& s : shapes) {
        if (m >= 300 && s.n * s.k > 130 * 257) continue;  // keeps the oracle fast
        TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, s.k});
        TestTensor b = RandomTensor(ref(), rng, w, {s.n, s.k});
        TestTensor out_ref(ref(), DType::kF32, {m, s.n});
        TestTensor a_cpu = a.CloneTo(cpu()), b_cpu = b.CloneTo(cpu());
        TestTensor out_cpu(cpu(), DType::kF32, {m, s.n});
        ref().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
        cpu().Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = out_cpu.view()});
        ExpectClose(out_cpu.Read(), out_ref.Read(), Atol(s.k), 1e-5,
                    std::string(DTypeName(w)) + " m=" + std::to_string(m) +
                        " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k),
                    out_ref.shape());
      }
    }
  }
}

// Largest |x[i] - y[i]|.
double MaxDiff(const std::vector<float>& x, const std::vector<float>& y) {
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(double{x[i]} - y[i]));
  return d;
}

// bf16 activations (--dtype=bfloat16): both backends round a to bf16 before it meets bf16
// weights, so the products are the same exact values and only the summation order differs:
// the f32 tolerance holds on the f32 dot-product (m <= 16), packed and (avx512_bf16) BF16
// dot-product paths, the last in chunks of 4 rows and depth passes of 2048 (k = 4161). f32
// weights are not rounded against. The rounded result is far from the
// f32 one, so the comparison tells a rounding kernel from one that does not round.
TEST_P(CpuGemmTest, Bf16ActivationsMatchRef) {
  std::mt19937 rng(15);
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (int64_t m : {1, 3, 5, 16, 17, 64, 300}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{33, 47}, {130, 257}, {64, 1100},
                          {40, 96}, {24, 2048}, {13, 4161}}) {
        if (m >= 300 && n * k > 130 * 257) continue;  // keeps the oracle fast
        TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, k});
        TestTensor b = RandomTensor(ref(), rng, w, {n, k});
        TestTensor out_ref(ref(), DType::kF32, {m, n}), out_f32(ref(), DType::kF32, {m, n});
        ref_bf16().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
        ref().Gemm({.a = a.view(), .b = b.view(), .out = out_f32.view()});
        TestTensor a_cpu = a.CloneTo(cpu_bf16()), b_cpu = b.CloneTo(cpu_bf16());
        TestTensor out_cpu(cpu_bf16(), DType::kF32, {m, n});
        cpu_bf16().Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = out_cpu.view()});
        const std::string what = std::string(DTypeName(w)) + " m=" + std::to_string(m) +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k);
        ExpectClose(out_cpu.Read(), out_ref.Read(), Atol(k), 1e-5, what, out_ref.shape());
        const double rounding = MaxDiff(out_ref.Read(), out_f32.Read());
        if (w == DType::kBF16) {
          EXPECT_GT(rounding, 20 * Atol(k)) << what;
        } else {
          EXPECT_EQ(rounding, 0.0) << what;
        }
      }
    }
  }
}

// With batch_invariant, a row's result is the same bit for bit whatever the number of rows
// computed with it, for decode rows (dot products) and prompt rows (packed) alike: neither the
// dispatch nor the blocking may depend on m. Results still match the oracle. bf16 activations
// (--dtype=bfloat16 --deterministic) take their own dot product on builds with AVX512_BF16.
TEST_P(CpuGemmTest, BatchInvariantRowsDoNotDependOnTheRowCount) {
  std::mt19937 rng(13);
  constexpr int64_t kRows = 80;
  for (DType act : {DType::kF32, DType::kBF16}) {
    Backend& cpu = act == DType::kF32 ? cpu_invariant() : cpu_invariant_bf16();
    Backend& oracle = act == DType::kF32 ? ref() : ref_bf16();
    for (DType w : {DType::kBF16, DType::kF32}) {
      // k = 4500: more than one pass of every fixed depth (2048, 4096), with a partial vector
      // at the end; k = 10944: the bf16 dot product rounds fewer rows of A at once (44) than
      // it does at smaller depths (64), and 65 rows or more take two groups.
      for (auto [n, k] : {std::pair<int64_t, int64_t>{130, 257}, {64, 1100}, {24, 4500},
                          {8, 10944}}) {
        TestTensor a = RandomTensor(ref(), rng, DType::kF32, {kRows, k});
        TestTensor b = RandomTensor(ref(), rng, w, {n, k});
        TestTensor out_ref(ref(), DType::kF32, {kRows, n});
        oracle.Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
        TestTensor a_cpu = a.CloneTo(cpu), b_cpu = b.CloneTo(cpu);
        for (bool decode : {true, false}) {
          TestTensor all(cpu, DType::kF32, {kRows, n});
          cpu.Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = all.view(),
                    .decode_rows = decode ? kRows : 0});
          const std::vector<float> all_rows = all.Read();
          const std::string what = std::string(DTypeName(act)) + " x " + std::string(DTypeName(w)) +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                   (decode ? " decode" : " prompt");
          ExpectClose(all_rows, out_ref.Read(), Atol(k), 1e-5, what, out_ref.shape());
          for (int64_t m : {1, 2, 7, 16, 17, 33, 45, 65}) {
            TestTensor first(cpu, DType::kF32, {m, n});
            cpu.Gemm({.a = a_cpu.view().Slice(0, 0, m), .b = b_cpu.view(), .out = first.view(),
                      .decode_rows = decode ? m : 0});
            const std::vector<float> rows = first.Read();
            for (int64_t i = 0; i < m * n; ++i) {
              ASSERT_EQ(rows[i], all_rows[i]) << what << " m=" << m << " element " << i;
            }
          }
        }
      }
    }
  }
}

// a and out are column slices of wider matrices (row strides larger than their widths).
TEST_P(CpuGemmTest, StridedRowsLeaveOtherColumnsUntouched) {
  std::mt19937 rng(12);
  for (int64_t m : {1, 5, 40}) {
    const int64_t n = 45, k = 70, a_pitch = 83, out_pitch = 61;
    TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, a_pitch});
    TestTensor b = RandomTensor(ref(), rng, DType::kBF16, {n, k});
    TestTensor out_ref = RandomTensor(ref(), rng, DType::kF32, {m, out_pitch});
    TestTensor a_cpu = a.CloneTo(cpu()), b_cpu = b.CloneTo(cpu());
    TestTensor out_cpu = out_ref.CloneTo(cpu());
    const int64_t a0 = 9, out0 = 7;
    ref().Gemm({.a = a.view().Slice(1, a0, k),
                .b = b.view(),
                .out = out_ref.view().Slice(1, out0, n)});
    cpu().Gemm({.a = a_cpu.view().Slice(1, a0, k),
                .b = b_cpu.view(),
                .out = out_cpu.view().Slice(1, out0, n)});
    ExpectClose(out_cpu.Read(), out_ref.Read(), Atol(k), 1e-5, "m=" + std::to_string(m),
                out_ref.shape());
  }
}

// The MLA weight-absorption pattern: per-head GEMMs over a [tokens, heads, dim] activation seen
// as [heads, tokens, dim], writing [tokens, heads, n] seen as [heads, tokens, n].
TEST_P(CpuGemmTest, BatchedPerHeadTransposedViews) {
  std::mt19937 rng(13);
  for (int64_t heads : {1, 3, 16}) {
    for (int64_t tokens : {1, 7, 65}) {
      for (DType w : {DType::kBF16, DType::kF32}) {
        const int64_t k = 48, n = 40;
        TestTensor a = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, k});
        TestTensor b = RandomTensor(ref(), rng, w, {heads, n, k});
        TestTensor out_ref(ref(), DType::kF32, {tokens, heads, n});
        TestTensor a_cpu = a.CloneTo(cpu()), b_cpu = b.CloneTo(cpu());
        TestTensor out_cpu(cpu(), DType::kF32, {tokens, heads, n});
        ref().Gemm({.a = a.view().Transpose(0, 1),
                    .b = b.view(),
                    .out = out_ref.view().Transpose(0, 1)});
        cpu().Gemm({.a = a_cpu.view().Transpose(0, 1),
                    .b = b_cpu.view(),
                    .out = out_cpu.view().Transpose(0, 1)});
        ExpectClose(out_cpu.Read(), out_ref.Read(), Atol(k), 1e-5,
                    "heads=" + std::to_string(heads) + " tokens=" + std::to_string(tokens) +
                        " " + std::string(DTypeName(w)),
                    out_ref.shape());
      }
    }
  }
}

// A wide output and few rows: the column split leaves one panel per thread or less.
TEST_P(CpuGemmTest, FewerPanelsThanThreadsSplitsRows) {
  std::mt19937 rng(14);
  for (int64_t m : {9, 100, 601}) {
    const int64_t n = 5, k = 520;
    TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, k});
    TestTensor b = RandomTensor(ref(), rng, DType::kBF16, {n, k});
    TestTensor out_ref(ref(), DType::kF32, {m, n});
    TestTensor a_cpu = a.CloneTo(cpu()), b_cpu = b.CloneTo(cpu());
    TestTensor out_cpu(cpu(), DType::kF32, {m, n});
    ref().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
    cpu().Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = out_cpu.view()});
    ExpectClose(out_cpu.Read(), out_ref.Read(), Atol(k), 1e-5, "m=" + std::to_string(m),
                out_ref.shape());
  }
}

// Sixteen threads: outputs of a few to a few dozen panels, so some calls split rows among the
// threads of a panel and others only columns. Against the oracle, and bit for bit against two
// threads where both take the packed path for every row (--deterministic): a row's products
// and their order do not depend on the split.
TEST_P(CpuGemmTest, ManyThreadsSplitRowsAndColumns) {
  std::mt19937 rng(16);
  const std::unique_ptr<CpuBackend> wide = NewCpu(16);
  const std::unique_ptr<CpuBackend> wide_invariant = NewCpu(16, /*batch_invariant=*/true);
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (auto [m, n] : {std::pair<int64_t, int64_t>{128, 40}, {512, 200}, {601, 576}, {300, 33}}) {
      const int64_t k = 300;
      TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, k});
      TestTensor b = RandomTensor(ref(), rng, w, {n, k});
      TestTensor out_ref(ref(), DType::kF32, {m, n});
      ref().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
      const std::string what = std::string(DTypeName(w)) + " m=" + std::to_string(m) +
                               " n=" + std::to_string(n);
      std::vector<float> invariant[2];
      for (Backend* backend : {static_cast<Backend*>(wide.get()), &cpu_invariant(),
                               static_cast<Backend*>(wide_invariant.get())}) {
        TestTensor a_cpu = a.CloneTo(*backend), b_cpu = b.CloneTo(*backend);
        TestTensor out_cpu(*backend, DType::kF32, {m, n});
        backend->Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = out_cpu.view()});
        const std::vector<float> got = out_cpu.Read();
        ExpectClose(got, out_ref.Read(), Atol(k), 1e-5, what, out_ref.shape());
        if (backend != wide.get()) invariant[backend == &cpu_invariant() ? 0 : 1] = got;
      }
      EXPECT_EQ(invariant[0], invariant[1]) << what << ": 16 threads changed bits";
    }
  }
}

MLASERVE_INSTANTIATE_CPU_ISAS(CpuGemmTest);

}  // namespace
}  // namespace mlaserve::test
