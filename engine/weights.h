// Checkpoint: the safetensors files of a Hugging Face model directory, memory-mapped.
// WeightLoader: copies checkpoint tensors into backend memory in the dtype the backend
// computes with, checking names and shapes, and reports tensors nobody asked for.
//
// Supported: model.safetensors, or shards listed by model.safetensors.index.json; dtypes
// BF16, F16, F32 and F8_E4M3 with a "<name>_scale_inv" F32 tensor of 128x128 block scales
// (DeepSeek-V3's format). Every header is parsed with bounds checks: a corrupt or truncated
// file gives an error naming the file or the tensor, never an out-of-bounds read.
#ifndef MLASERVE_ENGINE_WEIGHTS_H_
#define MLASERVE_ENGINE_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace mlaserve {

struct CheckpointTensor {
  std::string name;
  std::string file;  // the shard it lives in (for error messages)
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // inside the mmap, valid while the Checkpoint lives
  size_t nbytes = 0;
};

// Parses one safetensors file held in memory at [base, base + file_bytes): the 8-byte header
// length, the JSON header and every tensor entry, each checked against the data region
// (dtype, shape, offsets inside the file, span matching the shape, no two tensors sharing
// bytes). The tensors' `data` point into [base, base + file_bytes). Any malformed input is an
// InvalidArgument error naming `path` (and the tensor); this never throws. Checkpoint::Open
// parses each mapped file with it.
absl::StatusOr<std::vector<CheckpointTensor>> ParseSafetensors(const std::string& path,
                                                               const uint8_t* base,
                                                               uint64_t file_bytes);

class Checkpoint {
 public:
  // Opens DIR/model.safetensors or every shard named by DIR/model.safetensors.index.json.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);
  ~Checkpoint();

  // nullptr when absent.
  const CheckpointTensor* Find(std::string_view name) const;
  const std::map<std::string, CheckpointTensor, std::less<>>& tensors() const { return tensors_; }

 private:
  struct Mapping {
    void* addr;
    size_t bytes;
  };
  Checkpoint() = default;
  static absl::StatusOr<std::unique_ptr<Checkpoint>> OpenImpl(const std::string& model_dir);
  std::vector<Mapping> mappings_;
  std::map<std::string, CheckpointTensor, std::less<>> tensors_;
};

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

#endif  // MLASERVE_ENGINE_WEIGHTS_H_
