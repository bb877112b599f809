// Test helpers that write Hugging Face style checkpoints: safetensors files (well-formed or
// deliberately corrupt), model.safetensors.index.json, and a self-deleting temp directory.
#ifndef MLASERVE_TESTS_ENGINE_SAFETENSORS_WRITER_UTIL_H_
#define MLASERVE_TESTS_ENGINE_SAFETENSORS_WRITER_UTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace mlaserve {

// Builds one safetensors file in memory; tensors are laid out in the order they are added.
// The header is padded with spaces to a multiple of 8 bytes, as the safetensors library does.
class SafetensorsWriter {
 public:
  // Raw little-endian element bytes; `dtype` is written as given ("BF16", "F8_E4M3", or any
  // string, for error tests). The byte count is not checked against the shape.
  SafetensorsWriter& Add(std::string name, std::string dtype, std::vector<int64_t> shape,
                         std::string bytes);
  SafetensorsWriter& AddF32(std::string name, std::vector<int64_t> shape,
                            const std::vector<float>& values);
  // Rounds each value to bf16 (round-to-nearest-even).
  SafetensorsWriter& AddBf16(std::string name, std::vector<int64_t> shape,
                             const std::vector<float>& values);
  SafetensorsWriter& AddF16Bits(std::string name, std::vector<int64_t> shape,
                                const std::vector<uint16_t>& bits);
  SafetensorsWriter& AddF8Bits(std::string name, std::vector<int64_t> shape,
                               const std::vector<uint8_t>& bits);
  SafetensorsWriter& SetMetadata(std::string key, std::string value);

  std::string HeaderJson() const;  // unpadded
  std::string Bytes() const;       // the whole file
  absl::Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// An 8-byte little-endian header length (which may lie), `header`, then `data`: for writing
// corrupt files by hand.
std::string RawSafetensors(uint64_t header_length, std::string_view header, std::string_view data);
// Same with the true header length.
std::string RawSafetensors(std::string_view header, std::string_view data);

absl::Status WriteBytes(const std::string& path, std::string_view bytes);

// Writes DIR/model.safetensors.index.json with the given tensor name -> shard file map.
absl::Status WriteSafetensorsIndex(const std::string& dir,
                                   const std::map<std::string, std::string>& weight_map);

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace mlaserve

#endif  // MLASERVE_TESTS_ENGINE_SAFETENSORS_WRITER_UTIL_H_
