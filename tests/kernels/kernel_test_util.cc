#include "tests/kernels/kernel_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/check.h"
#include "kernels/dtype.h"

namespace mlaserve::test {
namespace {

TensorView MakeView(void* data, DType dtype, const std::vector<int64_t>& s) {
  switch (s.size()) {
    case 1:
      return TensorView(data, dtype, {s[0]});
    case 2:
      return TensorView(data, dtype, {s[0], s[1]});
    case 3:
      return TensorView(data, dtype, {s[0], s[1], s[2]});
    case 4:
      return TensorView(data, dtype, {s[0], s[1], s[2], s[3]});
    default:
      MLASERVE_CHECK_MSG(false, "TestTensor takes 1 to 4 dimensions");
  }
  return TensorView();
}

std::string IndexString(int64_t flat, std::span<const int64_t> shape) {
  if (shape.empty()) return std::to_string(flat);
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

}  // namespace

TestTensor::TestTensor(Backend& backend, DType dtype, std::vector<int64_t> shape)
    : backend_(&backend), shape_(std::move(shape)) {
  MLASERVE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI32);
  int64_t numel = 1;
  for (int64_t e : shape_) {
    MLASERVE_CHECK(e >= 0);
    numel *= e;
  }
  absl::StatusOr<DeviceBuffer> buffer = backend.Allocate(numel * DTypeSize(dtype));
  MLASERVE_CHECK(buffer.ok());
  buffer_ = *std::move(buffer);
  view_ = MakeView(buffer_.data(), dtype, shape_);
}

void TestTensor::Write(std::span<const float> values) {
  MLASERVE_CHECK(static_cast<int64_t>(values.size()) == numel());
  if (dtype() == DType::kF32) {
    backend_->CopyFromHost(values.data(), values.size_bytes(), view_);
    return;
  }
  MLASERVE_CHECK(dtype() == DType::kBF16);
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = F32ToBf16(values[i]);
  backend_->CopyFromHost(bits.data(), bits.size() * sizeof(uint16_t), view_);
}

void TestTensor::WriteInts(std::span<const int32_t> values) {
  MLASERVE_CHECK(dtype() == DType::kI32 && static_cast<int64_t>(values.size()) == numel());
  backend_->CopyFromHost(values.data(), values.size_bytes(), view_);
}

std::vector<float> TestTensor::Read() const {
  std::vector<float> values(numel());
  if (dtype() == DType::kF32) {
    backend_->CopyToHost(view_, values.data(), values.size() * sizeof(float));
    return values;
  }
  MLASERVE_CHECK(dtype() == DType::kBF16);
  std::vector<uint16_t> bits(values.size());
  backend_->CopyToHost(view_, bits.data(), bits.size() * sizeof(uint16_t));
  for (size_t i = 0; i < bits.size(); ++i) values[i] = Bf16ToF32(bits[i]);
  return values;
}

std::vector<int32_t> TestTensor::ReadInts() const {
  MLASERVE_CHECK(dtype() == DType::kI32);
  std::vector<int32_t> values(numel());
  backend_->CopyToHost(view_, values.data(), values.size() * sizeof(int32_t));
  return values;
}

TestTensor TestTensor::CloneTo(Backend& backend) const {
  TestTensor copy(backend, dtype(), shape_);
  std::vector<char> bytes(view_.nbytes());
  backend_->CopyToHost(view_, bytes.data(), bytes.size());
  backend.CopyFromHost(bytes.data(), bytes.size(), copy.view_);
  return copy;
}

std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> RandomInts(std::mt19937& rng, int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> RandomPermutation(std::mt19937& rng, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

TestTensor RandomTensor(Backend& backend, std::mt19937& rng, DType dtype,
                        std::vector<int64_t> shape, float lo, float hi) {
  TestTensor t(backend, dtype, std::move(shape));
  t.Write(RandomFloats(rng, t.numel(), lo, hi));
  return t;
}

TestTensor FloatTensor(Backend& backend, DType dtype, std::vector<int64_t> shape,
                       std::span<const float> values) {
  TestTensor t(backend, dtype, std::move(shape));
  t.Write(values);
  return t;
}

TestTensor IntTensor(Backend& backend, std::vector<int64_t> shape,
                     std::span<const int32_t> values) {
  TestTensor t(backend, DType::kI32, std::move(shape));
  t.WriteInts(values);
  return t;
}

float RoundBf16(float x) { return Bf16ToF32(F32ToBf16(x)); }

std::vector<float> RoundBf16(std::span<const float> x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = RoundBf16(x[i]);
  return r;
}

std::vector<float> RoundTo(DType dtype, std::span<const float> x) {
  MLASERVE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16);
  if (dtype == DType::kBF16) return RoundBf16(x);
  return std::vector<float>(x.begin(), x.end());
}

::testing::AssertionResult AllClose(std::span<const float> actual, std::span<const float> expected,
                                    double atol, double rtol, std::span<const int64_t> shape) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: actual " << actual.size() << " vs expected " << expected.size();
  }
  int64_t mismatches = 0, first = -1, worst = -1;
  double worst_err = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const double err = std::abs(a - e);
    const bool ok =
        a == e || (std::isfinite(a) && std::isfinite(e) && err <= atol + rtol * std::abs(e));
    if (ok) continue;
    ++mismatches;
    if (first < 0) first = static_cast<int64_t>(i);
    // NaN errors rank above any finite one.
    if (worst < 0 || !(err <= worst_err)) {
      worst = static_cast<int64_t>(i);
      worst_err = err;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  std::ostringstream msg;
  msg.precision(9);
  msg << mismatches << " of " << actual.size() << " elements differ (atol " << atol << ", rtol "
      << rtol << "); first at " << IndexString(first, shape) << ": actual " << actual[first]
      << " vs expected " << expected[first] << "; largest error at " << IndexString(worst, shape)
      << ": actual " << actual[worst] << " vs expected " << expected[worst];
  return ::testing::AssertionFailure() << msg.str();
}

void ExpectClose(std::span<const float> actual, std::span<const float> expected, double atol,
                 double rtol, std::string_view what, std::span<const int64_t> shape,
                 const char* file, int line) {
  const ::testing::AssertionResult close = AllClose(actual, expected, atol, rtol, shape);
  if (!close) ADD_FAILURE_AT(file, line) << what << ": " << close.message();
}

}  // namespace mlaserve::test
