// Checkpoint: the safetensors files of a Hugging Face model directory, memory-mapped.
//
// Supported: model.safetensors, or shards listed by model.safetensors.index.json; dtypes
// BF16, F16, F32 and F8_E4M3 with a "<name>_scale_inv" F32 tensor of 128x128 block scales
// (DeepSeek-V3's format). Every header is parsed with bounds checks: a corrupt or truncated
// file gives an error naming the file or the tensor, never an out-of-bounds read.
#ifndef MLASERVE_ENGINE_CHECKPOINT_H_
#define MLASERVE_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"

namespace mlaserve {

// The suffix of an F8_E4M3 tensor's companion block-scale tensor ("<name>_scale_inv").
inline constexpr char kScaleSuffix[] = "_scale_inv";

// "[a, b, c]", for error messages.
std::string ShapeString(absl::Span<const int64_t> shape);
// The element count of `shape`; nullopt when a dimension is negative or the product overflows.
std::optional<int64_t> CheckedNumel(absl::Span<const int64_t> shape);

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
  absl::Status AddFile(const std::string& path);
  std::vector<Mapping> mappings_;
  std::map<std::string, CheckpointTensor, std::less<>> tensors_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_CHECKPOINT_H_
