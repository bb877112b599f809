// TensorView: a non-owning, strided view of device memory (host memory for the CPU backends).
// Views are cheap values; they never allocate. Shapes have at most kMaxDims dimensions and
// strides are counted in elements. Kernels require the innermost stride to be 1 unless a
// params.h field says otherwise.
#ifndef MLASERVE_KERNELS_TENSOR_H_
#define MLASERVE_KERNELS_TENSOR_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "kernels/check.h"
#include "kernels/dtype.h"

namespace mlaserve {

class TensorView {
 public:
  static constexpr int kMaxDims = 4;

  TensorView() = default;

  // A contiguous row-major view of `data` with the given shape.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape)
      : data_(data), dtype_(dtype), ndim_(static_cast<int>(shape.size())) {
    MLASERVE_CHECK(ndim_ <= kMaxDims);
    int i = 0;
    for (int64_t s : shape) shape_[i++] = s;
    int64_t stride = 1;
    for (int d = ndim_ - 1; d >= 0; --d) {
      strides_[d] = stride;
      stride *= shape_[d];
    }
  }

  // A view with explicit strides (elements).
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides)
      : TensorView(data, dtype, shape) {
    MLASERVE_CHECK(strides.size() == shape.size());
    int i = 0;
    for (int64_t s : strides) strides_[i++] = s;
  }

  bool empty() const { return data_ == nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  int ndim() const { return ndim_; }
  int64_t size(int d) const { return shape_[Dim(d)]; }
  int64_t stride(int d) const { return strides_[Dim(d)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim_; ++d) n *= shape_[d];
    return n;
  }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int d = ndim_ - 1; d >= 0; --d) {
      if (shape_[d] != 1 && strides_[d] != expected) return false;
      expected *= shape_[d];
    }
    return true;
  }
  // Bytes spanned by a contiguous view.
  int64_t nbytes() const { return numel() * static_cast<int64_t>(DTypeSize(dtype_)); }

  // Elements [start, start + length) of dimension d; strides are kept.
  TensorView Slice(int d, int64_t start, int64_t length) const {
    d = Dim(d);
    MLASERVE_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d]);
    TensorView v = *this;
    v.data_ = static_cast<char*>(data_) +
              start * strides_[d] * static_cast<int64_t>(DTypeSize(dtype_));
    v.shape_[d] = length;
    return v;
  }

  // Same memory, new shape; the view must be contiguous.
  TensorView Reshape(std::initializer_list<int64_t> shape) const {
    MLASERVE_CHECK(is_contiguous());
    TensorView v(data_, dtype_, shape);
    MLASERVE_CHECK(v.numel() == numel());
    return v;
  }

  // Same memory with dimensions a and b swapped (strides follow).
  TensorView Transpose(int a, int b) const {
    TensorView v = *this;
    a = Dim(a);
    b = Dim(b);
    std::swap(v.shape_[a], v.shape_[b]);
    std::swap(v.strides_[a], v.strides_[b]);
    return v;
  }

 private:
  int Dim(int d) const {
    if (d < 0) d += ndim_;
    MLASERVE_CHECK(d >= 0 && d < ndim_);
    return d;
  }

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_TENSOR_H_
