// Validation helpers for op parameters, shared by the host backends. Each Check* aborts with a
// message naming the offending field and its actual dtype/shape; a mismatch is a programmer
// error (see kernels/backend.h), never an input error.
#ifndef MLASERVE_KERNELS_SHAPE_CHECK_H_
#define MLASERVE_KERNELS_SHAPE_CHECK_H_

#include <cstdint>
#include <initializer_list>

#include "kernels/dtype.h"
#include "kernels/params.h"
#include "kernels/tensor.h"

namespace mlaserve {

// A set of accepted element types; a single DType converts implicitly.
class DTypeSet {
 public:
  constexpr DTypeSet(DType t) : mask_(Bit(t)) {}
  constexpr DTypeSet operator|(DTypeSet o) const { return DTypeSet(mask_ | o.mask_); }
  constexpr bool contains(DType t) const { return (mask_ & Bit(t)) != 0; }

 private:
  constexpr explicit DTypeSet(uint32_t mask) : mask_(mask) {}
  static constexpr uint32_t Bit(DType t) { return 1u << static_cast<uint32_t>(t); }
  uint32_t mask_;
};

// The dtypes params.h calls "w" (weights).
inline constexpr DTypeSet kWeightDTypes = DTypeSet(DType::kF32) | DTypeSet(DType::kBF16);
// The dtypes accepted for the paged latent KV cache.
inline constexpr DTypeSet kKvCacheDTypes = kWeightDTypes;

// Matches any extent in a shape passed to CheckTensor.
inline constexpr int64_t kAnyDim = -1;

// Requires `v` to be present, of a dtype in `dtypes`, of exactly `shape` (kAnyDim matches any
// extent) and with a contiguous innermost dimension.
void CheckTensor(const TensorView& v, const char* name, DTypeSet dtypes,
                 std::initializer_list<int64_t> shape);

// Requires `v` to be fully contiguous (row-major, no gaps).
void CheckContiguous(const TensorView& v, const char* name);

// True when the byte ranges spanned by the two views intersect. Strides must be non-negative.
bool Overlaps(const TensorView& a, const TensorView& b);

// Sizes of a MoeExpertsParams, after checking every field against params.h (one validator
// shared by all backends). `total` is num_tokens_post_pad[0] (read on the host).
struct MoeExpertsShape {
  int64_t num_tokens, hidden, num_experts, inter, top_k, num_pairs, block, len, total;
};
MoeExpertsShape CheckMoeExperts(const MoeExpertsParams& p);

// Sizes of a GemmParams (2-D, or 3-D batched over the first dimension: batch 1 otherwise),
// after checking a, b and out against params.h and that out overlaps neither input.
struct GemmShape {
  bool batched;
  int64_t batch, m, k, n;
};
GemmShape CheckGemm(const GemmParams& p);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_SHAPE_CHECK_H_
