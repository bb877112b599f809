// Which decode rows run on tiles on a batch-invariant CPU backend (GemmPath::kFixedTiles, on
// builds with CpuKernels::fixed_tiles: the AMX ones): those against bf16 weight matrices of at
// least min_bytes_per_thread bytes for each thread of the team. The rule reads the weight and
// the team, never the call's rows, so a row's path (and its rounding) does not depend on what
// shares its step. Small weights (a few tile pairs per thread, each call starting cold) and the
// routed experts keep the vector dot products.
//
// The default follows what the 16-core Xeon with AMX measured (docs/performance.md, "Decode rows
// on tiles under --deterministic"): with bf16 activations, weights of 1 MiB a thread or more on
// tiles (16 streams 1.28-1.39x faster, one stream unchanged within the noise); with f32
// activations none (16 streams 1.19x faster, but one stream 0.70-0.85x as fast: the tiles with
// the exact split's three products per weight tile fall behind the stream at one row, where the
// one product of bf16 activations keeps up).
#ifndef MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_
#define MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_

#include <cstdint>
#include <string>

namespace mlaserve {

struct DecodeTiles {
  // Bytes of a weight per team thread from which its decode rows take the tiles; < 0: none.
  int64_t min_bytes_per_thread = -1;
  // "default", "MLASERVE_CPU_DECODE_TILES", the default with the ignored value named, or (a
  // CpuBackend on a build without tiles) why there are none.
  std::string source;
};

// The default threshold with bf16 activations (bytes per thread); f32 activations: none.
inline constexpr int64_t kDefaultDecodeTileBytes = int64_t{1} << 20;

// From MLASERVE_CPU_DECODE_TILES's value (env, null when unset): "off" (no decode row on tiles),
// "all" (every bf16 weight), or a whole number of KiB per thread; anything else keeps the
// default for the activations (bf16_activations: --dtype=bfloat16) and says so in `source`.
DecodeTiles ChooseDecodeTiles(const char* env, bool bf16_activations);

// "off", "all" or "<N>KiB", as the start-up log prints the choice.
std::string DecodeTilesName(const DecodeTiles& d);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_DECODE_TILES_H_
