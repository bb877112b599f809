// Element access shared by the ref kernels: offsets count elements and honour every stride;
// values are widened to double on load and rounded once on store.
#ifndef MLASERVE_KERNELS_REF_REF_ACCESS_H_
#define MLASERVE_KERNELS_REF_REF_ACCESS_H_

#include <cstdint>

#include "kernels/check.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace mlaserve::ref {

inline int64_t Off(const TensorView& v, int64_t i0) { return i0 * v.stride(0); }
inline int64_t Off(const TensorView& v, int64_t i0, int64_t i1) {
  return i0 * v.stride(0) + i1 * v.stride(1);
}
inline int64_t Off(const TensorView& v, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * v.stride(0) + i1 * v.stride(1) + i2 * v.stride(2);
}

// Reads an f32 or bf16 element.
inline double Load(const TensorView& v, int64_t offset) {
  switch (v.dtype()) {
    case DType::kF32:
      return v.ptr<const float>()[offset];
    case DType::kBF16:
      return Bf16ToF32(v.ptr<const uint16_t>()[offset]);
    default:
      MLASERVE_CHECK_MSG(false, "ref kernels read f32 or bf16 only");
  }
  return 0.0;
}

// Reads an element of a GEMM input: rounded to bf16 (nearest even) when `to_bf16`
// (Backend::activation_dtype).
inline double LoadInput(const TensorView& v, int64_t offset, bool to_bf16) {
  const double x = Load(v, offset);
  return to_bf16 ? RoundToBf16(static_cast<float>(x)) : x;
}

// Writes an f32 or bf16 element, rounding to nearest even.
inline void Store(const TensorView& v, int64_t offset, double x) {
  switch (v.dtype()) {
    case DType::kF32:
      v.ptr<float>()[offset] = static_cast<float>(x);
      return;
    case DType::kBF16:
      v.ptr<uint16_t>()[offset] = F32ToBf16(static_cast<float>(x));
      return;
    default:
      MLASERVE_CHECK_MSG(false, "ref kernels write f32 or bf16 only");
  }
}

inline int32_t LoadI32(const TensorView& v, int64_t offset) {
  return v.ptr<const int32_t>()[offset];
}

}  // namespace mlaserve::ref

#endif  // MLASERVE_KERNELS_REF_REF_ACCESS_H_
