// The bf16 dot-product GEMM of builds with VDPBF16PS (V::DotBf16; see cpu_gemm_impl.h for the
// rules of these headers): bf16 activations (GemmArgs::a_bf16) against bf16 weights on the
// dot-product paths, GemmPath::kFixedDot for any m and kBySize up to kMaxM rows. The rows of A
// are rounded to bf16 as 32-bit words (two bf16 of consecutive k), which is how a bf16 weight
// row already lies in memory, so one VDPBF16PS multiplies 32 elements of a row of A by 32 of a
// weight row read in place, where the f32 dot path widens every weight vector and issues two
// FMAs per 32 elements.
//
// Order: every output element has its own accumulator; within a depth pass of kDepth elements
// its lanes add pairs of products in k order, then the lanes are reduced by V::ReduceAdd and
// the passes added in order. None of this depends on m, the chunk or the tile, so a row's
// result does not depend on the rows computed with it (the batch invariance kFixedDot needs).
// The products are the packed path's exact values; only the order of the sums differs.
//
// Blocking: a group of up to kGroupRows rows of A is rounded once per call, every depth pass
// of it (in L2). The weights are walked once per group, a tile of up to 6 weight rows (24
// accumulators) at a time, and each tile is run for every chunk of 4 rows of the group in turn,
// the first reading its weight lines from memory and the others from L1. Every chunk requests
// the lines of the tile `ahead_tiles` on: with the first chunk alone requesting them the walk
// was no faster than the block order before it, with every chunk 1.2-1.3x on a Zen 4 host, the
// stream then going on while the arithmetic runs (docs/performance.md, "A 16-row bf16 decode
// GEMM"). Column blocks that fit half the L2 order the depth passes of a deep weight: a
// block's rows pass by pass, then the next block.
#ifndef MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_

#include <cstdint>
#include <utility>

#include "kernels/cpu/cpu_gemv_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/check.h"

namespace mlaserve::cpu_impl {

template <class V>
struct DotBf16Impl {
  using F = typename V::F;
  using Words = typename V::Words;
  using Gemv = GemvImpl<V>;
  static constexpr int64_t kStep = 2 * V::kW;  // k elements per dot-product instruction
  static constexpr int kChunkRows = Gemv::kChunkRows;
  static constexpr int64_t kDepth = 2048;
  static constexpr int64_t kPitch = kDepth / 2 + 16;  // words per rounded pass of a row
  static_assert(kDepth % kStep == 0 && kChunkRows * kPitch <= kGemmScratchFloats);
  // Rows of A up to which kBySize takes this path rather than the packed one.
  static constexpr int64_t kMaxM = 16;

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }

  static bool Takes(const GemmArgs& g) {
    if (!g.a_bf16 || g.b_dtype != DType::kBF16) return false;
    return g.path == GemmPath::kFixedDot || (g.path == GemmPath::kBySize && g.m <= kMaxM);
  }

  // Row i0 + i of A, elements [k0, k0 + kb), rounded to bf16 at dst + i * kPitch words, zero
  // from kb to the end of the last whole vector.
  static void RoundRows(const GemmArgs& g, int64_t i0, int64_t rows, int64_t k0, int64_t kb,
                        uint32_t* dst) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = Gemv::ARow(g, i0 + i) + k0;
      uint32_t* row = dst + i * kPitch;
      for (int64_t l = 0; l < kb; l += kStep) {
        V::StoreWords(row + l / 2, V::RoundPair(V::LoadN(src + l, kb - l),
                                                V::LoadN(src + l + V::kW, kb - l - V::kW)));
      }
    }
  }

  // Which lines a tile requests as it goes: none, or the same columns `ahead_tiles` tiles on,
  // into L2 or past the caches.
  enum class Requests { kNone, kAheadL2, kAheadNta };

  // C[i][j + r] (+)= A row i · weight row j + r over kb elements, i < M, r < R, requesting
  // the lines `tuning.ahead_tiles` tiles on as the f32 dot path does (cpu_gemv_impl.h).
  template <int M, int R>
  static void Tile(const uint32_t* a, const uint16_t* b, int64_t ldb, int64_t kb,
                   float* const* c, int64_t j, bool acc, const StreamTuning& tuning) {
    const uint16_t* rows = b + j * ldb;
    const int64_t ahead = R * ldb * tuning.ahead_tiles;
    if (tuning.ahead_tiles == 0) {
      Steps<M, R, Requests::kNone>(a, rows, ldb, kb, c, j, acc, 0);
    } else if (tuning.non_temporal) {
      Steps<M, R, Requests::kAheadNta>(a, rows, ldb, kb, c, j, acc, ahead);
    } else {
      Steps<M, R, Requests::kAheadL2>(a, rows, ldb, kb, c, j, acc, ahead);
    }
  }

  // Tile's loop for one kind of requests, each at `offset` elements from the line it reads.
  template <int M, int R, Requests kRequests>
  static void Steps(const uint32_t* a, const uint16_t* rows, int64_t ldb, int64_t kb,
                    float* const* c, int64_t j, bool acc, int64_t offset) {
    F s[M * R];  // element (i, r) at i * R + r
#pragma GCC unroll 32
    for (int e = 0; e < M * R; ++e) s[e] = V::Zero();
    auto step = [&](int64_t l, int64_t n) {
      Words bv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const uint16_t* at = rows + r * ldb + l;
        if constexpr (kRequests != Requests::kNone) {
          Gemv::PrefetchLine(at + offset, kRequests == Requests::kAheadNta);
        }
        bv[r] = n >= kStep ? V::LoadBf16(at) : V::LoadBf16N(at, n);
      }
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const Words av = V::LoadWords(a + i * kPitch + l / 2);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) s[i * R + r] = V::DotBf16(s[i * R + r], av, bv[r]);
      }
    };
    int64_t l = 0;
    for (; l + kStep <= kb; l += kStep) step(l, kStep);
    if (l < kb) step(l, kb - l);  // A's words are zero past kb; B's elements are masked to zero
    Gemv::template StoreSums<M, R>(s, c, j, acc);
  }

  static constexpr int64_t kTile = Gemv::TileRows(kChunkRows);
  // Rows of A rounded at once (their every pass, as the scratch allows): each weight tile is
  // read from memory once per group.
  static constexpr int64_t kGroupRows = 64;

  using TileFn = void (*)(const uint32_t*, const uint16_t*, int64_t, int64_t, float* const*,
                          int64_t, bool, const StreamTuning&);
  // Tile<rows, R> for 1 <= rows <= kChunkRows and R = kTile (wide) or 1.
  template <size_t... I>
  static TileFn TileFor(int64_t rows, bool wide, std::index_sequence<I...>) {
    static constexpr TileFn kWide[] = {&Tile<static_cast<int>(I) + 1, kTile>...};
    static constexpr TileFn kOne[] = {&Tile<static_cast<int>(I) + 1, 1>...};
    return (wide ? kWide : kOne)[rows - 1];
  }

  // Requires Takes(g), g.m > 0, g.k > 0. scratch: kGemmScratchFloats.
  static void Run(const GemmArgs& g, float* scratch) {
    uint32_t* a = reinterpret_cast<uint32_t*>(scratch);
    const StreamTuning tuning = StreamTuningForRows(CurrentStreamTuning(), g.m, g.k > kDepth);
    const int64_t passes = (g.k + kDepth - 1) / kDepth;
    int64_t group = Lo(kGroupRows, kGemmScratchFloats / (passes * kPitch));
    if (group > kChunkRows) group = group / kChunkRows * kChunkRows;
    MLASERVE_CHECK(group >= 1);  // k up to kGemmScratchFloats / kPitch passes
    // A single row's tile is one weight row, one stream (Gemv::TileRows).
    const int64_t tile = g.m == 1 ? 1 : kTile;
    constexpr int64_t kL2Bytes = 512 * 1024;
    const int64_t row_bytes = Lo(g.k, kDepth) * 2;
    const int64_t block =
        row_bytes * tile >= kL2Bytes ? tile : kL2Bytes / row_bytes / tile * tile;
    const auto chunk_rows = std::make_index_sequence<kChunkRows>();
    const uint16_t* w = static_cast<const uint16_t*>(g.b);
    for (int64_t r0 = 0; r0 < g.m; r0 += group) {
      const int64_t rows = Lo(group, g.m - r0);
      const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
      float* c[kGroupRows];
      TileFn wide[kGroupRows / kChunkRows], one[kGroupRows / kChunkRows];
      for (int64_t i = 0; i < rows; ++i) c[i] = Gemv::CRow(g, r0 + i);
      for (int64_t q = 0; q < chunks; ++q) {
        const int64_t m = Lo(kChunkRows, rows - q * kChunkRows);
        wide[q] = TileFor(m, tile > 1, chunk_rows);
        one[q] = TileFor(m, false, chunk_rows);
      }
      for (int64_t p = 0; p < passes; ++p) {
        RoundRows(g, r0, rows, p * kDepth, Lo(kDepth, g.k - p * kDepth), a + p * rows * kPitch);
      }
      for (int64_t jb = g.n_begin; jb < g.n_end; jb += block) {
        const int64_t je = Lo(jb + block, g.n_end);
        for (int64_t p = 0; p < passes; ++p) {
          const int64_t k0 = p * kDepth, kb = Lo(kDepth, g.k - k0);
          const bool acc = g.accumulate || k0 > 0;
          const uint32_t* ap = a + p * rows * kPitch;
          int64_t j = jb;
          for (; j + tile <= je; j += tile) {
            for (int64_t q = 0; q < chunks; ++q) {
              wide[q](ap + q * kChunkRows * kPitch, w + k0, g.ldb, kb, c + q * kChunkRows, j,
                      acc, tuning);
            }
          }
          for (; j < je; ++j) {
            for (int64_t q = 0; q < chunks; ++q) {
              one[q](ap + q * kChunkRows * kPitch, w + k0, g.ldb, kb, c + q * kChunkRows, j,
                     acc, tuning);
            }
          }
        }
      }
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_
