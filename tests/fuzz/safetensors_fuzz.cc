// Fuzzes ParseSafetensors (engine/weights.h) with arbitrary file contents: truncated files,
// lying header lengths and offsets, huge shapes. Every input must come back as tensors or an
// error Status, and every accepted tensor must lie inside the input, sized by its shape.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "engine/checkpoint.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan catches any read past the end of the "file".
  std::unique_ptr<uint8_t[]> file(new uint8_t[size]);
  if (size > 0) std::memcpy(file.get(), data, size);
  const absl::StatusOr<std::vector<mlaserve::CheckpointTensor>> tensors =
      mlaserve::ParseSafetensors("fuzz.safetensors", file.get(), size);
  if (!tensors.ok()) return 0;
  for (const mlaserve::CheckpointTensor& t : *tensors) {
    const auto* begin = static_cast<const uint8_t*>(t.data);
    FUZZ_CHECK(begin >= file.get() + 8 && begin + t.nbytes <= file.get() + size);
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    FUZZ_CHECK(numel * mlaserve::DTypeSize(t.dtype) == t.nbytes);
  }
  return 0;
}
