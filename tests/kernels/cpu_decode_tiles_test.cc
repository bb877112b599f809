// MLASERVE_CPU_DECODE_TILES (kernels/cpu/cpu_decode_tiles.h) and the path it gives decode rows
// (CpuContext::DecodeRowsPath): read from the weight's dtype, rank and bytes per thread only.
#include "kernels/cpu/cpu_decode_tiles.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/tensor.h"

namespace mlaserve {
namespace {

TEST(DecodeTilesTest, ParsesTheVariable) {
  // Unset: large weights with bf16 activations, none with f32 ones.
  const DecodeTiles bf16 = ChooseDecodeTiles(nullptr, /*bf16_activations=*/true);
  EXPECT_EQ(bf16.min_bytes_per_thread, kDefaultDecodeTileBytes);
  EXPECT_EQ(bf16.source, "default");
  EXPECT_EQ(DecodeTilesName(bf16), "1024KiB");
  const DecodeTiles f32 = ChooseDecodeTiles(nullptr, /*bf16_activations=*/false);
  EXPECT_EQ(f32.min_bytes_per_thread, -1);
  EXPECT_EQ(DecodeTilesName(f32), "off");
  for (bool b : {false, true}) {
    EXPECT_EQ(ChooseDecodeTiles("off", b).min_bytes_per_thread, -1);
    EXPECT_EQ(ChooseDecodeTiles("all", b).min_bytes_per_thread, 0);
    EXPECT_EQ(DecodeTilesName(ChooseDecodeTiles("all", b)), "all");
    const DecodeTiles kib = ChooseDecodeTiles("512", b);
    EXPECT_EQ(kib.min_bytes_per_thread, 512 * 1024);
    EXPECT_EQ(kib.source, "MLASERVE_CPU_DECODE_TILES");
    for (const char* bad : {"", "-3", "1M", "on"}) {
      const DecodeTiles d = ChooseDecodeTiles(bad, b);
      EXPECT_EQ(d.min_bytes_per_thread, b ? kDefaultDecodeTileBytes : -1) << bad;
      EXPECT_NE(d.source.find(std::string("=") + bad + " ignored"), std::string::npos)
          << d.source;
    }
  }
}

// Threshold 1 KiB a thread on two threads: a bf16 matrix of 2 KiB or more takes the tiles on the
// AMX build, smaller ones, f32 ones, batched (3-D) ones and every build without fixed tiles the
// dot products.
TEST(DecodeTilesTest, PathFollowsTheWeightOnly) {
  if (DetectCpuIsa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "the emulated tiles need AVX512_BF16";
  ::setenv("MLASERVE_CPU_DECODE_TILES", "1", 1);
  CpuBackend amx(AmxEmulatedKernels(), 2, /*batch_invariant=*/true);
  CpuBackend vector(Avx512Bf16Kernels(), 2, /*batch_invariant=*/true);
  ::unsetenv("MLASERVE_CPU_DECODE_TILES");
  EXPECT_EQ(DecodeTilesName(amx.decode_tiles()), "1KiB");
  std::vector<uint16_t> data(4096);
  const TensorView large(data.data(), DType::kBF16, {8, 128});    // 2 KiB
  const TensorView small(data.data(), DType::kBF16, {8, 127});    // under 2 KiB
  const TensorView f32(data.data(), DType::kF32, {4, 128});       // 2 KiB of f32
  const TensorView batched(data.data(), DType::kBF16, {2, 8, 128});
  EXPECT_EQ(amx.context().DecodeRowsPath(large), GemmPath::kFixedTiles);
  EXPECT_EQ(amx.context().DecodeRowsPath(small), GemmPath::kFixedDot);
  EXPECT_EQ(amx.context().DecodeRowsPath(f32), GemmPath::kFixedDot);
  EXPECT_EQ(amx.context().DecodeRowsPath(batched), GemmPath::kFixedDot);
  EXPECT_EQ(vector.context().DecodeRowsPath(large), GemmPath::kFixedDot);
  EXPECT_EQ(DecodeTilesName(vector.decode_tiles()), "off");
  EXPECT_EQ(vector.decode_tiles().source, "no tiles in the avx512_bf16 build");
}

}  // namespace
}  // namespace mlaserve
