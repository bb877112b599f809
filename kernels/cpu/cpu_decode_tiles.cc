#include "kernels/cpu/cpu_decode_tiles.h"

#include <cstring>

#include "absl/strings/numbers.h"

namespace mlaserve {

DecodeTiles ChooseDecodeTiles(const char* env, bool bf16_activations) {
  const int64_t fallback = bf16_activations ? kDefaultDecodeTileBytes : -1;
  if (env == nullptr) return {fallback, "default"};
  const DecodeTiles set{0, "MLASERVE_CPU_DECODE_TILES"};
  if (std::strcmp(env, "off") == 0) return {-1, set.source};
  if (std::strcmp(env, "all") == 0) return set;
  int64_t kib = 0;
  if (absl::SimpleAtoi(env, &kib) && kib >= 0 && kib <= (int64_t{1} << 40)) {
    return {kib << 10, set.source};
  }
  return {fallback, std::string("default (MLASERVE_CPU_DECODE_TILES=") + env + " ignored)"};
}

std::string DecodeTilesName(const DecodeTiles& d) {
  if (d.min_bytes_per_thread < 0) return "off";
  if (d.min_bytes_per_thread == 0) return "all";
  return std::to_string(d.min_bytes_per_thread >> 10) + "KiB";
}

}  // namespace mlaserve
