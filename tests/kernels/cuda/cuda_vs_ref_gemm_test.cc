// CudaBackend Gemm against the oracle over the CPU parity grid (odd m, n, k; bf16 and f32
// weights): f32 weights go through cuBLAS's f32 GEMM, bf16 weights with f32 activations through
// the GEMV kernel (at most 64 rows) or cuBLAS bf16 x bf16 over three exact bf16 parts of a
// (more rows), bf16 weights with bf16 activations through the bf16 staging buffer and cuBLAS
// bf16 x bf16; batch-invariant backends use the GEMV kernel for decode rows and the tiled kernel
// for the rest. Strided and batched (per-head,
// transposed) views reach each path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

using CudaGemmTest = CudaVsRefTest;

// Accumulation-order error grows like sqrt(k) for random data (as in the CPU parity test).
double Atol(int64_t k) { return 2e-6 * std::sqrt(static_cast<double>(k) + 1.0) * 8; }

std::string What(DType w, int64_t m, int64_t n, int64_t k) {
  return std::string(DTypeName(w)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k);
}

TEST_F(CudaGemmTest, MatchesRefOverShapeGrid) {
  std::mt19937 rng(11);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {3, 5},     {16, 16},
                                                           {33, 47},  {64, 300},  {130, 257},
                                                           {257, 520}};
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (int64_t m : {1, 2, 3, 7, 8, 9, 16, 17, 64, 65, 300, 512, 700}) {
      for (auto [n, k] : shapes) {
        if (m >= 300 && n * k > 130 * 257) continue;  // keeps the oracle fast
        TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, k});
        TestTensor b = RandomTensor(ref(), rng, w, {n, k});
        TestTensor out_ref(ref(), DType::kF32, {m, n});
        TestTensor a_gpu = a.CloneTo(cuda()), b_gpu = b.CloneTo(cuda());
        TestTensor out_gpu(cuda(), DType::kF32, {m, n});
        ref().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
        cuda().Gemm({.a = a_gpu.view(), .b = b_gpu.view(), .out = out_gpu.view()});
        ExpectClose(out_gpu.Read(), out_ref.Read(), Atol(k), 1e-5, What(w, m, n, k),
                    out_ref.shape());
      }
    }
  }
}

// bf16 weights with f32 activations beyond the GEMV's 64 rows go to the tensor cores, each
// activation cut into three bf16 parts. Each a = ±(1 ± 2⁻⁹ ± 2⁻¹⁷) has a part in each of hi,
// mid and lo, b holds ±1 and ±2, and every partial sum of 40 terms is a multiple of 2⁻¹⁷ below
// 2⁷, exact in f32: out must equal the exact sum bit for bit in any summation order, where
// rounding a to bf16 or dropping a part would miss it by a multiple of 2⁻¹⁷. Batched too.
TEST_F(CudaGemmTest, F32ActivationsKeepEveryBitBeyondTheGemv) {
  std::mt19937 rng(19);
  std::uniform_int_distribution<int> coin(0, 1);
  auto sign = [&] { return coin(rng) != 0 ? 1.0f : -1.0f; };
  constexpr int64_t kBatch = 2, kM = 80, kN = 20, kK = 40;
  std::vector<float> a(kBatch * kM * kK), b(kBatch * kN * kK);
  for (float& x : a) x = sign() * (1.0f + sign() * 0x1p-9f + sign() * 0x1p-17f);
  for (float& x : b) x = sign() * static_cast<float>(1 + coin(rng));
  for (bool batched : {false, true}) {
    const int64_t batch = batched ? kBatch : 1;
    auto shape = [&](int64_t rows) {
      return batched ? std::vector<int64_t>{batch, rows, kK} : std::vector<int64_t>{rows, kK};
    };
    TestTensor a_gpu(cuda(), DType::kF32, shape(kM)), b_gpu(cuda(), DType::kBF16, shape(kN));
    a_gpu.Write(std::span<const float>(a).first(batch * kM * kK));
    b_gpu.Write(std::span<const float>(b).first(batch * kN * kK));
    TestTensor out(cuda(), DType::kF32,
                   batched ? std::vector<int64_t>{batch, kM, kN} : std::vector<int64_t>{kM, kN});
    cuda().Gemm({.a = a_gpu.view(), .b = b_gpu.view(), .out = out.view()});
    const std::vector<float> got = out.Read();
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < kM; ++i) {
        for (int64_t j = 0; j < kN; ++j) {
          double exact = 0;
          for (int64_t l = 0; l < kK; ++l) {
            exact += double{a[(bi * kM + i) * kK + l]} * b[(bi * kN + j) * kK + l];
          }
          ASSERT_EQ(got[(bi * kM + i) * kN + j], exact)
              << "batch " << bi << " row " << i << " column " << j << (batched ? " batched" : "");
        }
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

// bf16 activations: a is rounded to bf16 before it meets bf16 weights (never f32 weights), as
// the oracle does, on the staged cuBLAS path and (batch invariant) in the tiled kernel; the
// rounded result is far from the f32 one, so a backend that does not round fails.
TEST_F(CudaGemmTest, Bf16ActivationsMatchRef) {
  std::mt19937 rng(15);
  absl::StatusOr<std::unique_ptr<Backend>> invariant =
      NewTestCudaBackend({.batch_invariant = true, .activation_dtype = DType::kBF16});
  ASSERT_TRUE(invariant.ok()) << invariant.status();
  for (Backend* gpu : {&cuda_bf16(), invariant->get()}) {
    for (DType w : {DType::kBF16, DType::kF32}) {
      for (int64_t m : {1, 3, 16, 17, 64, 300}) {
        for (auto [n, k] : {std::pair<int64_t, int64_t>{33, 47}, {130, 257}, {64, 1100}}) {
          if (m >= 300 && n * k > 130 * 257) continue;  // keeps the oracle fast
          const std::string what = What(w, m, n, k) + (gpu->batch_invariant() ? " invariant" : "");
          TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, k});
          TestTensor b = RandomTensor(ref(), rng, w, {n, k});
          TestTensor out_ref(ref(), DType::kF32, {m, n}), out_f32(ref(), DType::kF32, {m, n});
          ref_bf16().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
          ref().Gemm({.a = a.view(), .b = b.view(), .out = out_f32.view()});
          TestTensor a_gpu = a.CloneTo(*gpu), b_gpu = b.CloneTo(*gpu);
          TestTensor out_gpu(*gpu, DType::kF32, {m, n});
          gpu->Gemm({.a = a_gpu.view(), .b = b_gpu.view(), .out = out_gpu.view()});
          ExpectClose(out_gpu.Read(), out_ref.Read(), Atol(k), 1e-5, what, out_ref.shape());
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
  EXPECT_TRUE((*invariant)->Synchronize().ok());
}

// With batch_invariant, a row's result is the same bit for bit whatever the number of rows
// computed with it, and still matches the oracle.
TEST_F(CudaGemmTest, BatchInvariantRowsDoNotDependOnTheRowCount) {
  std::mt19937 rng(13);
  constexpr int64_t kRows = 40;
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{130, 257}, {64, 1100}}) {
      TestTensor a = RandomTensor(ref(), rng, DType::kF32, {kRows, k});
      TestTensor b = RandomTensor(ref(), rng, w, {n, k});
      TestTensor out_ref(ref(), DType::kF32, {kRows, n});
      ref().Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
      TestTensor a_gpu = a.CloneTo(cuda_invariant()), b_gpu = b.CloneTo(cuda_invariant());
      TestTensor all(cuda_invariant(), DType::kF32, {kRows, n});
      cuda_invariant().Gemm({.a = a_gpu.view(), .b = b_gpu.view(), .out = all.view()});
      const std::vector<float> all_rows = all.Read();
      ExpectClose(all_rows, out_ref.Read(), Atol(k), 1e-5, What(w, kRows, n, k),
                  out_ref.shape());
      for (int64_t m : {1, 2, 7, 16, 17, 33}) {
        TestTensor first(cuda_invariant(), DType::kF32, {m, n});
        cuda_invariant().Gemm(
            {.a = a_gpu.view().Slice(0, 0, m), .b = b_gpu.view(), .out = first.view()});
        const std::vector<float> rows = first.Read();
        for (int64_t i = 0; i < m * n; ++i) {
          ASSERT_EQ(rows[i], all_rows[i]) << What(w, m, n, k) << " element " << i;
        }
      }
    }
  }
}

// With batch_invariant, rows [0, decode_rows) go through the GEMV kernel's order and the rest
// through the tiled kernel's: a decode row's bits are those of the row computed alone, whatever
// rows (decode or prompt) share the call and whether a is 16-byte aligned (k % 8 == 0 takes the
// vector loads, otherwise scalar ones); prompt rows keep the tiled bits; all match the oracle.
TEST_F(CudaGemmTest, BatchInvariantDecodeRowsDoNotDependOnTheirCompany) {
  std::mt19937 rng(17);
  constexpr int64_t kRows = 40;
  for (bool bf16_act : {false, true}) {
    absl::StatusOr<std::unique_ptr<Backend>> made = NewTestCudaBackend(
        {.batch_invariant = true, .activation_dtype = bf16_act ? DType::kBF16 : DType::kF32});
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& gpu = **made;
    Backend& oracle = bf16_act ? ref_bf16() : ref();
    for (DType w : {DType::kBF16, DType::kF32}) {
      for (auto shape : {std::pair<int64_t, int64_t>{130, 1024}, {29, 1304}, {37, 257}, {64, 8}}) {
        const int64_t n = shape.first, k = shape.second;  // named: the lambdas below capture them
        const std::string what = What(w, kRows, n, k) + (bf16_act ? " bf16 activations" : "");
        // a sits one column into a wider matrix as well, so its rows are misaligned there.
        TestTensor wide = RandomTensor(ref(), rng, DType::kF32, {kRows, k + 1});
        TestTensor b = RandomTensor(ref(), rng, w, {n, k});
        TestTensor a = TestTensor(ref(), DType::kF32, {kRows, k});
        std::vector<float> a_values = wide.Read(), packed;
        for (int64_t i = 0; i < kRows; ++i) {
          packed.insert(packed.end(), a_values.begin() + i * (k + 1) + 1,
                        a_values.begin() + (i + 1) * (k + 1));
        }
        a.Write(packed);
        TestTensor out_ref(ref(), DType::kF32, {kRows, n});
        oracle.Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
        TestTensor a_gpu = a.CloneTo(gpu), wide_gpu = wide.CloneTo(gpu), b_gpu = b.CloneTo(gpu);
        auto run = [&](TensorView a_view, int64_t m, int64_t decode_rows) {
          TestTensor out(gpu, DType::kF32, {m, n});
          gpu.Gemm({.a = a_view.Slice(0, 0, m), .b = b_gpu.view(), .out = out.view(),
                    .decode_rows = decode_rows});
          return out.Read();
        };
        const std::vector<float> tiled = run(a_gpu.view(), kRows, 0);
        std::vector<float> alone;
        for (int64_t i = 0; i < kRows; ++i) {
          TestTensor out(gpu, DType::kF32, {1, n});
          gpu.Gemm({.a = a_gpu.view().Slice(0, i, 1), .b = b_gpu.view(), .out = out.view(),
                    .decode_rows = 1});
          const std::vector<float> row = out.Read();
          alone.insert(alone.end(), row.begin(), row.end());
        }
        ExpectClose(alone, out_ref.Read(), Atol(k), 1e-5, what + " decode rows", out_ref.shape());
        ExpectClose(tiled, out_ref.Read(), Atol(k), 1e-5, what + " prompt rows", out_ref.shape());
        const TensorView misaligned = wide_gpu.view().Slice(1, 1, k);
        for (auto [m, d, a_view] : {std::tuple<int64_t, int64_t, TensorView>{kRows, kRows, a_gpu.view()},
                                    {kRows, 5, a_gpu.view()}, {17, 16, a_gpu.view()},
                                    {kRows, 33, misaligned}, {9, 9, misaligned}}) {
          const std::vector<float> got = run(a_view, m, d);
          for (int64_t i = 0; i < m * n; ++i) {
            const float want = i / n < d ? alone[i] : tiled[i];
            ASSERT_EQ(got[i], want) << what << " m=" << m << " decode_rows=" << d << " element "
                                    << i;
          }
        }
      }
    }
    EXPECT_TRUE(gpu.Synchronize().ok());
  }
}

// a and out are column slices of wider matrices (row strides larger than their widths), on
// every path; the other columns of out keep their contents.
TEST_F(CudaGemmTest, StridedRowsLeaveOtherColumnsUntouched) {
  std::mt19937 rng(12);
  for (DType w : {DType::kBF16, DType::kF32}) {
    for (int64_t m : {1, 5, 40}) {
      const int64_t n = 45, k = 70, a_pitch = 83, out_pitch = 61, a0 = 9, out0 = 7;
      TestTensor a = RandomTensor(ref(), rng, DType::kF32, {m, a_pitch});
      TestTensor b = RandomTensor(ref(), rng, w, {n, k});
      TestTensor out = RandomTensor(ref(), rng, DType::kF32, {m, out_pitch});
      for (bool bf16 : {false, true}) {
        Backend& oracle = bf16 ? ref_bf16() : ref();
        Backend& gpu = bf16 ? cuda_bf16() : cuda();
        TestTensor out_ref = out.CloneTo(ref());
        TestTensor a_gpu = a.CloneTo(gpu), b_gpu = b.CloneTo(gpu), out_gpu = out.CloneTo(gpu);
        oracle.Gemm({.a = a.view().Slice(1, a0, k),
                     .b = b.view(),
                     .out = out_ref.view().Slice(1, out0, n)});
        gpu.Gemm({.a = a_gpu.view().Slice(1, a0, k),
                  .b = b_gpu.view(),
                  .out = out_gpu.view().Slice(1, out0, n)});
        ExpectClose(out_gpu.Read(), out_ref.Read(), Atol(k), 1e-5,
                    What(w, m, n, k) + (bf16 ? " bf16 activations" : ""), out_ref.shape());
      }
    }
  }
}

// The MLA weight-absorption pattern: per-head GEMMs over a [tokens, heads, dim] activation seen
// as [heads, tokens, dim], writing [tokens, heads, n] seen as [heads, tokens, n].
TEST_F(CudaGemmTest, BatchedPerHeadTransposedViews) {
  std::mt19937 rng(13);
  for (int64_t heads : {1, 3, 16}) {
    for (int64_t tokens : {1, 7, 65}) {
      for (DType w : {DType::kBF16, DType::kF32}) {
        for (bool bf16 : {false, true}) {
          Backend& oracle = bf16 ? ref_bf16() : ref();
          Backend& gpu = bf16 ? cuda_bf16() : cuda();
          const int64_t k = 48, n = 40;
          TestTensor a = RandomTensor(ref(), rng, DType::kF32, {tokens, heads, k});
          TestTensor b = RandomTensor(ref(), rng, w, {heads, n, k});
          TestTensor out_ref(ref(), DType::kF32, {tokens, heads, n});
          TestTensor a_gpu = a.CloneTo(gpu), b_gpu = b.CloneTo(gpu);
          TestTensor out_gpu(gpu, DType::kF32, {tokens, heads, n});
          oracle.Gemm({.a = a.view().Transpose(0, 1),
                       .b = b.view(),
                       .out = out_ref.view().Transpose(0, 1)});
          gpu.Gemm({.a = a_gpu.view().Transpose(0, 1),
                    .b = b_gpu.view(),
                    .out = out_gpu.view().Transpose(0, 1)});
          ExpectClose(out_gpu.Read(), out_ref.Read(), Atol(k), 1e-5,
                      "heads=" + std::to_string(heads) + " " + What(w, tokens, n, k) +
                          (bf16 ? " bf16 activations" : ""),
                      out_ref.shape());
        }
      }
    }
  }
}

}  // namespace
}  // namespace mlaserve::test
