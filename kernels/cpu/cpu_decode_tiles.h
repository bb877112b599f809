// Which decode rows run on tiles on a batch-invariant CPU backend (GemmPath::kFixedTiles, on
// builds with CpuKernels::fixed_tiles: the AMX ones): those against bf16 weight matrices of at
// least min_bytes_per_thread bytes for each thread of the team. The rule reads the weight and
// the team, never the call's rows, so a row's path (and its rounding) does not depend on what
// shares its step. Large weights stream long enough per thread for the tiles to reach the
// memory's rate with one row and to be faster from 8 rows (docs/performance.md, "Decode rows on
// AMX tiles"); small ones (a few tile pairs per thread) start each call cold and keep the
// vector dot products, as do the routed experts.
#ifndef MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_
#define MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_

#include <cstdint>
#include <string>

namespace mlaserve {

struct DecodeTiles {
  // Bytes of a weight per team thread from which its decode rows take the tiles; < 0: none.
  int64_t min_bytes_per_thread = -1;
  // "default", "MLASERVE_CPU_DECODE_TILES", or the default with the ignored value named.
  std::string source;
};

// The default threshold (bytes per thread).
inline constexpr int64_t kDefaultDecodeTileBytes = int64_t{1} << 20;

// From MLASERVE_CPU_DECODE_TILES's value (env, null when unset): "off" (no decode row on tiles),
// "all" (every bf16 weight), or a whole number of KiB per thread; anything else keeps the
// default and says so in `source`.
DecodeTiles ChooseDecodeTiles(const char* env);

// "off", "all" or "<N>KiB", as the start-up log prints the choice.
std::string DecodeTilesName(const DecodeTiles& d);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_
