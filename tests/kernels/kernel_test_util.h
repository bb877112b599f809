// Helpers shared by the kernel tests (linked into every tests/kernels/*_test.cc).
//
// - TestTensor owns memory allocated through a Backend, so MLASERVE_POISON=1 applies to it, and
//   moves contents through host vectors with CopyFromHost/CopyToHost, so the same test code
//   works on any backend (ref, cpu, cuda).
// - Random data comes from a caller-seeded std::mt19937: a failing case reproduces exactly.
// - AllClose / ExpectClose compare float data with numpy-style tolerances and report the first
//   mismatch, which is what a backend-against-oracle grid test needs to locate a bug.
//
// Typical use, comparing a backend with the oracle:
//   std::mt19937 rng(7);
//   TestTensor x = RandomTensor(*ref, rng, DType::kF32, {m, k});
//   TestTensor x_cpu = x.CloneTo(*cpu);
//   ... run the op on both ...
//   ExpectClose(out_cpu.Read(), out_ref.Read(), 1e-5, 1e-5, "gemm m=3", out_ref.shape());
#ifndef MLASERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define MLASERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace mlaserve::test {

// A contiguous tensor owned by the test, allocated on `backend` and left uninitialized (poisoned
// when MLASERVE_POISON=1). Move-only. The backend must outlive the tensor.
class TestTensor {
 public:
  // shape: 1 to TensorView::kMaxDims extents.
  TestTensor(Backend& backend, DType dtype, std::vector<int64_t> shape);

  TestTensor(TestTensor&&) = default;
  TestTensor& operator=(TestTensor&&) = default;

  // The whole tensor as a contiguous view; Slice/Transpose it for strided cases.
  const TensorView& view() const { return view_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return view_.dtype(); }
  int64_t numel() const { return view_.numel(); }

  // Overwrites every element. Floats are rounded to bf16 (nearest even) for a bf16 tensor; the
  // values must be exactly numel() long.
  void Write(std::span<const float> values);
  // Same for an i32 tensor.
  void WriteInts(std::span<const int32_t> values);

  // All elements in row-major order, converted to f32 (Read) or as i32 (ReadInts).
  std::vector<float> Read() const;
  std::vector<int32_t> ReadInts() const;

  // An independent tensor with the same dtype, shape and contents on `backend`.
  TestTensor CloneTo(Backend& backend) const;

 private:
  Backend* backend_;
  DeviceBuffer buffer_;
  std::vector<int64_t> shape_;
  TensorView view_;
};

// Uniform floats in [lo, hi).
std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f);
// Uniform integers in [lo, hi] (both ends included).
std::vector<int32_t> RandomInts(std::mt19937& rng, int64_t n, int32_t lo, int32_t hi);
// A uniformly shuffled 0, 1, ..., n - 1 (e.g. a block table that is not the identity).
std::vector<int32_t> RandomPermutation(std::mt19937& rng, int32_t n);

// A tensor of `dtype` (f32 or bf16) with every element uniform in [lo, hi), rounded to dtype.
TestTensor RandomTensor(Backend& backend, std::mt19937& rng, DType dtype,
                        std::vector<int64_t> shape, float lo = -1.0f, float hi = 1.0f);
// A float (f32 or bf16) tensor holding `values`, numel() of them.
TestTensor FloatTensor(Backend& backend, DType dtype, std::vector<int64_t> shape,
                       std::span<const float> values);
// An i32 tensor holding `values`, numel() of them.
TestTensor IntTensor(Backend& backend, std::vector<int64_t> shape, std::span<const int32_t> values);

// The f32 value a bf16 store of x reads back as (round to nearest even).
float RoundBf16(float x);
std::vector<float> RoundBf16(std::span<const float> x);
// x itself for f32, RoundBf16(x) for bf16: what a tensor of `dtype` holds after Write(x).
std::vector<float> RoundTo(DType dtype, std::span<const float> x);

// Success when actual and expected have the same length and every element satisfies
// |actual - expected| <= atol + rtol * |expected|, or both are the same infinity. NaN never
// matches, so reading poisoned memory fails. The failure message gives the mismatch count, the
// first mismatching index (as a multi-index when `shape` is given) and the largest error.
::testing::AssertionResult AllClose(std::span<const float> actual, std::span<const float> expected,
                                    double atol, double rtol, std::span<const int64_t> shape = {});

// A non-fatal failure unless AllClose(...) holds, reported at the caller's line and labelled
// with `what`. (The caller's file and line come from the builtins that std::source_location
// wraps, which clang 14 lacks as std::source_location.)
void ExpectClose(std::span<const float> actual, std::span<const float> expected, double atol,
                 double rtol, std::string_view what = "", std::span<const int64_t> shape = {},
                 const char* file = __builtin_FILE(), int line = __builtin_LINE());

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
