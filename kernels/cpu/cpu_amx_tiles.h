// The Intel AMX tile operations the AMX GEMM (cpu_amx_gemm_impl.h) is written against, as two
// interchangeable policies with one interface:
// - HardwareTiles issues the instructions (LDTILECFG, TILEZERO, TILELOADD, TDPBF16PS,
//   TILESTORED, TILERELEASE); it needs AMX-TILE and AMX-BF16 and Linux's permission for the
//   tile data state (cpu_features.cc asks for it).
// - EmulatedTiles carries out the same operations in software, each as the instruction's
//   definition in the Intel SDM states it: TDPBF16PS adds, for every row m of A and column n of
//   B, the products of each bf16 pair in k order, rounding to nearest even after each addition,
//   treating bf16 denormal inputs as zero and flushing denormal results to zero. It lets the
//   AMX GEMM's packing, tiling and edge handling run, and be tested, on processors without AMX.
//
// Include only from files compiled with the AMX flags (*_amx.cc). Every tile is configured as
// 16 rows of 64 bytes (palette 1), and the roles are fixed: C tiles 0-3 (C[r][c] is tile
// 2r + c, 16 x 16 f32), A tiles 4-5 (row block r: 16 rows of 16 bf16 pairs of consecutive k),
// B tiles 6-7 (column block c: 16 rows, one per pair of k, of 16 columns' bf16 pairs, the
// pair-interleaved layout TDPBF16PS reads).
#ifndef MLASERVE_KERNELS_CPU_CPU_AMX_TILES_H_
#define MLASERVE_KERNELS_CPU_CPU_AMX_TILES_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_avx512_traits.h"  // for <immintrin.h>, included as GCC 12 needs it

namespace mlaserve {
namespace {

// LDTILECFG's 64-byte memory operand.
struct TileConfig {
  uint8_t palette_id = 0;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline constexpr int kTileRows = 16;   // rows of every tile
inline constexpr int kTileBytes = 64;  // bytes per tile row

inline TileConfig AllTilesFull() {
  TileConfig config;
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = kTileBytes;
    config.rows[t] = kTileRows;
  }
  return config;
}

// The tile intrinsics take the register number as a literal (GCC pastes it into the
// instruction text), hence one branch per role.
struct HardwareTiles {
  static void Configure() {
    const TileConfig config = AllTilesFull();
    _tile_loadconfig(&config);
  }
  static void Release() { _tile_release(); }

  template <int R, int C>
  static void ZeroC() {
    if constexpr (R == 0 && C == 0) {
      _tile_zero(0);
    } else if constexpr (R == 0 && C == 1) {
      _tile_zero(1);
    } else if constexpr (R == 1 && C == 0) {
      _tile_zero(2);
    } else {
      _tile_zero(3);
    }
  }
  template <int R, int C>
  static void StoreC(float* dst, int64_t stride_bytes) {
    if constexpr (R == 0 && C == 0) {
      _tile_stored(0, dst, stride_bytes);
    } else if constexpr (R == 0 && C == 1) {
      _tile_stored(1, dst, stride_bytes);
    } else if constexpr (R == 1 && C == 0) {
      _tile_stored(2, dst, stride_bytes);
    } else {
      _tile_stored(3, dst, stride_bytes);
    }
  }
  template <int R>
  static void LoadA(const uint32_t* src, int64_t stride_bytes) {
    if constexpr (R == 0) {
      _tile_loadd(4, src, stride_bytes);
    } else {
      _tile_loadd(5, src, stride_bytes);
    }
  }
  template <int C>
  static void LoadB(const uint32_t* src, int64_t stride_bytes) {
    if constexpr (C == 0) {
      _tile_loadd(6, src, stride_bytes);
    } else {
      _tile_loadd(7, src, stride_bytes);
    }
  }
  // C[R][C] += A[R] · B[C].
  template <int R, int C>
  static void Dot() {
    if constexpr (R == 0 && C == 0) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (R == 0 && C == 1) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (R == 1 && C == 0) {
      _tile_dpbf16ps(2, 5, 6);
    } else {
      _tile_dpbf16ps(3, 5, 7);
    }
  }
};

struct EmulatedTiles {
  // The eight tile registers of the calling thread, 16 rows x 64 bytes each.
  struct Registers {
    alignas(64) uint8_t tile[8][kTileRows * kTileBytes];
  };
  static Registers& Regs() {
    thread_local Registers registers;
    return registers;
  }
  static float Bits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  // A bf16 as f32, a denormal as a zero of its sign.
  static float InputDaz(uint16_t h) {
    if ((h & 0x7f80u) == 0) h &= 0x8000u;
    return Bits(static_cast<uint32_t>(h) << 16);
  }
  static float OutputFtz(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return (bits & 0x7f800000u) == 0 ? Bits(bits & 0x80000000u) : x;
  }
  static void LoadTile(int t, const void* src, int64_t stride_bytes) {
    for (int r = 0; r < kTileRows; ++r) {
      std::memcpy(Regs().tile[t] + r * kTileBytes, static_cast<const char*>(src) + r * stride_bytes,
                  kTileBytes);
    }
  }

  static void Configure() {}
  static void Release() {}

  template <int R, int C>
  static void ZeroC() {
    std::memset(Regs().tile[2 * R + C], 0, sizeof(Regs().tile[0]));
  }
  template <int R, int C>
  static void StoreC(float* dst, int64_t stride_bytes) {
    for (int r = 0; r < kTileRows; ++r) {
      std::memcpy(reinterpret_cast<char*>(dst) + r * stride_bytes,
                  Regs().tile[2 * R + C] + r * kTileBytes, kTileBytes);
    }
  }
  template <int R>
  static void LoadA(const uint32_t* src, int64_t stride_bytes) {
    LoadTile(4 + R, src, stride_bytes);
  }
  template <int C>
  static void LoadB(const uint32_t* src, int64_t stride_bytes) {
    LoadTile(6 + C, src, stride_bytes);
  }
  template <int R, int C>
  static void Dot() {
    const uint8_t* a = Regs().tile[4 + R];
    const uint8_t* b = Regs().tile[6 + C];
    uint8_t* c = Regs().tile[2 * R + C];
    constexpr int kPairs = kTileBytes / 4;  // pairs per A row = rows of B
    constexpr int kCols = kTileBytes / 4;   // f32 columns of C
    for (int m = 0; m < kTileRows; ++m) {
      float row[kCols];
      std::memcpy(row, c + m * kTileBytes, sizeof(row));
      for (int k = 0; k < kPairs; ++k) {
        uint16_t a_pair[2];
        std::memcpy(a_pair, a + m * kTileBytes + 4 * k, sizeof(a_pair));
        for (int n = 0; n < kCols; ++n) {
          uint16_t b_pair[2];
          std::memcpy(b_pair, b + k * kTileBytes + 4 * n, sizeof(b_pair));
          // Each product of two bf16 is exact in f32, so only the additions round.
          row[n] = OutputFtz(row[n] + InputDaz(a_pair[0]) * InputDaz(b_pair[0]));
          row[n] = OutputFtz(row[n] + InputDaz(a_pair[1]) * InputDaz(b_pair[1]));
        }
      }
      std::memcpy(c + m * kTileBytes, row, sizeof(row));
    }
  }
};

}  // namespace
}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_AMX_TILES_H_
