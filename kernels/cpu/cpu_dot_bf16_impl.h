// The bf16 dot-product GEMM of builds with VDPBF16PS (V::DotBf16; see cpu_gemm_impl.h for the
// rules of these headers): bf16 activations (GemmArgs::a_bf16) against bf16 weights on the
// dot-product paths, GemmPath::kFixedDot for any m and kBySize up to kMaxM rows. A chunk of rows
// of A is rounded to bf16 as 32-bit words (two bf16 of consecutive k), which is how a bf16
// weight row already lies in memory, so one VDPBF16PS multiplies 32 elements of a row of A by 32
// of a weight row read in place, where the f32 dot path widens every weight vector and issues
// two FMAs per 32 elements.
//
// Order: every output element has its own accumulator; within a depth pass of kDepth elements
// its lanes add pairs of products in k order, then the lanes are reduced by V::ReduceAdd and
// the passes added in order. None of this depends on m, the chunk or the tile, so a row's
// result does not depend on the rows computed with it (the batch invariance kFixedDot needs).
// The products are the packed path's exact values; only the order of the sums differs.
//
// Blocking: column blocks of weight rows that fit half the L2 (each chunk of rows after the
// first reads the block from there), chunks of 4 rows of A (16 KiB per pass, in L1) rounded
// once per block and pass, tiles of up to 6 weight rows (24 accumulators). A region (a block's
// depth pass) is streamed from memory by its first chunk only; while the later chunks compute
// from L2, they request the next region into L2, so the stream overlaps the arithmetic instead
// of waiting for it (NextRegion, Tile's `next`).
#ifndef MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_

#include <cstdint>
#include <utility>

#include "kernels/cpu/cpu_gemv_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_stream_tuning.h"

namespace mlaserve::cpu_impl {

template <class V>
struct DotBf16Impl {
  using F = typename V::F;
  using Words = typename V::Words;
  using Gemv = GemvImpl<V>;
  static constexpr int64_t kStep = 2 * V::kW;  // k elements per dot-product instruction
  static constexpr int kChunkRows = Gemv::kChunkRows;
  static constexpr int64_t kDepth = 2048;
  static constexpr int64_t kPitch = kDepth / 2 + 16;  // words per rounded row of a chunk
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

  // The weight rows [j_begin, j_end), elements [k0, k0 + kb), of one depth pass of a block.
  struct Region {
    int64_t j_begin = 0, j_end = 0, k0 = 0, kb = 0;
  };

  // C[i][j + r] (+)= A row i · weight row j + r over kb elements, i < M, r < R. next: R weight
  // rows ldb apart, requested into L2 at the offsets this tile reads (nullptr: none).
  template <int M, int R>
  static void Tile(const uint32_t* a, const uint16_t* b, int64_t ldb, int64_t kb,
                   float* const* c, int64_t j, bool acc, const StreamTuning& tuning,
                   const uint16_t* next) {
    F s[M][R];
    Gemv::ZeroAll(s);
    const uint16_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = b + (j + r) * ldb;
    // The same columns of the weight rows `tuning.ahead_tiles` tiles on, as the f32 dot path
    // requests them (cpu_gemv_impl.h); Run passes none to the chunks that read from L2.
    const int64_t ahead = R * ldb * tuning.ahead_tiles;
    const bool prefetch = tuning.ahead_tiles > 0, nta = tuning.non_temporal;
    auto step = [&](int64_t l, int64_t n) {
      Words bv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        if (prefetch) Gemv::PrefetchLine(rows[r] + ahead + l, nta);
        if (next != nullptr) Gemv::PrefetchLine(next + r * ldb + l, false);
        bv[r] = n >= kStep ? V::LoadBf16(rows[r] + l) : V::LoadBf16N(rows[r] + l, n);
      }
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const Words av = V::LoadWords(a + i * kPitch + l / 2);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) s[i][r] = V::DotBf16(s[i][r], av, bv[r]);
      }
    };
    int64_t l = 0;
    for (; l + kStep <= kb; l += kStep) step(l, kStep);
    if (l < kb) step(l, kb - l);  // A's words are zero past kb; B's elements are masked to zero
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) {
        const float v = V::ReduceAdd(s[i][r]);
        c[i][j + r] = acc ? c[i][j + r] + v : v;
      }
    }
  }

  // Which tiles of a chunk request the next region: the later chunks of a region (every chunk
  // after its first) take turns by tile, so between them they request it once.
  struct NextShare {
    const Region* next = nullptr;  // nullptr: this chunk requests nothing
    int64_t turn = 0, turns = 1;   // tile t requests when t % turns == turn
  };

  // Columns cur.j_begin.. of depth pass cur for rows [i0, i0 + M), their rounded words at a.
  template <int M>
  static void Chunk(const GemmArgs& g, const uint32_t* a, int64_t i0, const Region& cur,
                    bool acc, const StreamTuning& tuning, NextShare share) {
    constexpr int kRows = Gemv::TileRows(M);
    float* c[M];
    for (int i = 0; i < M; ++i) c[i] = Gemv::CRow(g, i0 + i);
    const uint16_t* b = static_cast<const uint16_t*>(g.b) + cur.k0;
    int64_t j = cur.j_begin;
    for (int64_t t = 0; j + kRows <= cur.j_end; j += kRows, ++t) {
      const uint16_t* next = nullptr;
      if (share.next != nullptr && t % share.turns == share.turn) {
        const int64_t jn = share.next->j_begin + (j - cur.j_begin);
        if (jn + kRows <= share.next->j_end) {
          next = static_cast<const uint16_t*>(g.b) + jn * g.ldb + share.next->k0;
        }
      }
      Tile<M, kRows>(a, b, g.ldb, cur.kb, c, j, acc, tuning, next);
    }
    for (; j < cur.j_end; ++j) Tile<M, 1>(a, b, g.ldb, cur.kb, c, j, acc, tuning, nullptr);
  }

  template <size_t... I>
  static void ChunkFor(int64_t rows, std::index_sequence<I...>, const GemmArgs& g,
                       const uint32_t* a, int64_t i0, const Region& cur, bool acc,
                       const StreamTuning& tuning, NextShare share) {
    using Fn = void (*)(const GemmArgs&, const uint32_t*, int64_t, const Region&, bool,
                        const StreamTuning&, NextShare);
    static constexpr Fn kTable[] = {&Chunk<static_cast<int>(I) + 1>...};
    kTable[rows - 1](g, a, i0, cur, acc, tuning, share);
  }

  // The region after cur in Run's order (passes of a block, then the next block), if any.
  static bool NextRegion(const GemmArgs& g, int64_t block, const Region& cur, Region* next) {
    if (cur.k0 + kDepth < g.k) {
      *next = {cur.j_begin, cur.j_end, cur.k0 + kDepth, Lo(kDepth, g.k - cur.k0 - kDepth)};
      return true;
    }
    if (cur.j_end >= g.n_end) return false;
    *next = {cur.j_end, Lo(cur.j_end + block, g.n_end), 0, Lo(kDepth, g.k)};
    return true;
  }

  // Requires Takes(g), g.m > 0, g.k > 0. scratch: kGemmScratchFloats.
  static void Run(const GemmArgs& g, float* scratch) {
    uint32_t* a = reinterpret_cast<uint32_t*>(scratch);
    const StreamTuning tuning = StreamTuningForRows(CurrentStreamTuning(), g.m, g.k > kDepth);
    constexpr int64_t kL2Bytes = 512 * 1024;
    constexpr int64_t kTile = Gemv::TileRows(kChunkRows);
    const int64_t row_bytes = Lo(g.k, kDepth) * 2;
    const int64_t block =
        row_bytes * kTile >= kL2Bytes ? kTile : kL2Bytes / row_bytes / kTile * kTile;
    const int64_t later_chunks = (g.m - 1) / kChunkRows;
    // Only a region's first chunk reads it from memory, so only it requests lines ahead.
    StreamTuning from_l2 = tuning;
    from_l2.ahead_tiles = 0;
    for (int64_t jb = g.n_begin; jb < g.n_end; jb += block) {
      const int64_t je = Lo(jb + block, g.n_end);
      for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
        const Region cur{jb, je, k0, Lo(kDepth, g.k - k0)};
        Region next;
        const bool has_next = later_chunks > 0 && NextRegion(g, block, cur, &next);
        const bool acc = g.accumulate || k0 > 0;
        for (int64_t i0 = 0; i0 < g.m; i0 += kChunkRows) {
          const int64_t rows = Lo(kChunkRows, g.m - i0);
          NextShare share;
          if (has_next && i0 > 0) share = {&next, i0 / kChunkRows - 1, later_chunks};
          RoundRows(g, i0, rows, k0, cur.kb, a);
          ChunkFor(rows, std::make_index_sequence<kChunkRows>(), g, a, i0, cur, acc,
                   i0 == 0 ? tuning : from_l2, share);
        }
      }
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_DOT_BF16_IMPL_H_
