// WeightLoader: copies checkpoint tensors (engine/checkpoint.h) into backend memory in the dtype
// the backend computes with, checking names and shapes, and reports tensors nobody asked for.
#ifndef MLASERVE_ENGINE_WEIGHT_LOADER_H_
#define MLASERVE_ENGINE_WEIGHT_LOADER_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace mlaserve {

// Thread-compatible; used once at start-up.
class WeightLoader {
 public:
  // Float weights are stored on the backend as follows:
  // BF16 and F32 checkpoint tensors keep their dtype; F16 becomes F32; F8_E4M3 is dequantized
  // (value * block scale, in f32) and then stored as BF16.
  WeightLoader(const Checkpoint* checkpoint, Backend* backend);

  // Loads tensor `name`, which must exist with exactly `shape`. The result lives as long as
  // the loader. The error names the tensor and says what was expected.
  absl::StatusOr<TensorView> Load(std::string_view name, std::vector<int64_t> shape);
  // Like Load, but always converts to f32 (norm weights, router, correction bias).
  absl::StatusOr<TensorView> LoadF32(std::string_view name, std::vector<int64_t> shape);
  // Loads several same-shaped tensors [rows, cols] back to back into one tensor of
  // result_shape: [count, rows, cols] (stacked experts), [sum rows, cols] (concatenated
  // gate ‖ up) or any other shape with count * rows * cols elements and last dimension cols
  // (e.g. [experts, 2 * rows, cols] from interleaved gate/up names). All parts must share one
  // dtype after conversion.
  absl::StatusOr<TensorView> LoadConcat(const std::vector<std::string>& names,
                                        std::vector<int64_t> part_shape,
                                        std::vector<int64_t> result_shape);
  // Takes ownership of a buffer made by the caller (derived weights) so it lives as long as
  // the loader's other weights.
  void Keep(DeviceBuffer buffer);

  // Names in the checkpoint that no Load* call consumed, ignoring those for which
  // `ignored(name)` is true (e.g. rotary inv_freq, V3's multi-token-prediction layers).
  // Also ignores the "_scale_inv" companions of consumed FP8 tensors.
  std::vector<std::string> Unused(bool (*ignored)(std::string_view name)) const;

  // Bytes of backend memory held by loaded weights.
  uint64_t weight_bytes() const { return weight_bytes_; }

  // Hands the loaded buffers to the caller (the model keeps them alive).
  std::vector<DeviceBuffer> ReleaseBuffers();

 private:
  const Checkpoint* checkpoint_;
  Backend* backend_;
  std::set<std::string, std::less<>> consumed_;
  std::vector<DeviceBuffer> buffers_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_WEIGHT_LOADER_H_
