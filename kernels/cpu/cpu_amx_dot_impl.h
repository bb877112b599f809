// The AMX build's GEMM for decode rows against bf16 weights on tiles: calls by size
// (GemmPath::kBySize) of kMinRows to GemvImpl::kMaxM rows, such as the GEMMs of a decode step
// of 8-16 sequences without --deterministic, and calls of any m on GemmPath::kFixedTiles (the
// decode rows of large weights under --deterministic, CpuContext::DecodeRowsPath). Over a tile
// policy (HardwareTiles or EmulatedTiles, see cpu_amx_tiles.h). Include only from files
// compiled with the AMX flags (*_amx.cc).
//
// The product is computed transposed, Cᵀ = B · Aᵀ: the weights are the tiles' A operand, read
// in place (a tile is 16 weight rows of 32 consecutive k, exactly their row-major layout, loaded
// at the weights' row stride), and the rows of activations are the B operand, packed once per
// call into the pair-interleaved layout TDPBF16PS reads. So no weight is packed or widened: each
// 1 KiB weight tile costs one tile load and one TDPBF16PS (three with f32 activations) for up to
// 16 rows, where the vector dot products' FMAs grow with the rows. On the 16-core Xeon with AMX
// (docs/performance.md), 16 x 102400 x 2048 ran 1.34x (f32) and 2.9x (bf16) faster than the
// AVX-512 BF16 dot products, 4 rows 0.69x (f32) and 0.98x (bf16), one row alike: hence kMinRows
// for calls by size. More than 16 rows run in chunks of 16, as many chunks as the scratch holds
// packed at once (5 with f32 activations, 17 with bf16), each weight tile pair read for all of
// them in turn (from L2 after the first).
//
// Exactness: with f32 activations each element is split into three exact bf16 parts
// (SplitIntoBf16Parts), as on the packed path; products are exact in f32 and sums are f32, over
// depth blocks of kDepth in order (each block's value added to C), within a block in two tile
// accumulators (the hi and lo parts' products step by step in k order, and the mid parts'),
// added at the end of the block. None of this depends on m, the chunk or the column range, so
// a row's result does not depend on the rows computed with it (the batch invariance
// kFixedTiles needs).
//
// Weight tiles that would read past the column range or the depth are copied into a
// zero-padded tile first. The weight rows one tile pair on are requested into L2 in address
// order while a pair runs (for its first chunk of rows).
#ifndef MLASERVE_KERNELS_CPU_CPU_AMX_DOT_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_AMX_DOT_IMPL_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_amx_tiles.h"
#include "kernels/cpu/cpu_avx512_traits.h"
#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_gemv_impl.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::cpu_impl {

// x's lanes as hi + mid + lo, each part exactly a bf16 (so packing it as bf16 pairs converts it
// without rounding): hi = x cut to its top 16 bits, mid = x - hi cut the same way, lo = the rest
// (at most 8 significant bits); both differences are exact. Cutting a part takes one AND, where
// rounding it to bf16 took a conversion and a widening back to f32, both on the shuffle port the
// packing uses.
inline void SplitIntoBf16Parts(__m512 x, __m512 (&part)[3]) {
  const __m512i top16 = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  part[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), top16));
  const __m512 r = _mm512_sub_ps(x, part[0]);
  part[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r), top16));
  part[2] = _mm512_sub_ps(r, part[1]);
}

// The 32 elements of A at src (n of them; zero past n, and all zero for a null src) as 16
// words of bf16 pairs of consecutive k, one vector per part: the three parts of
// SplitIntoBf16Parts, or (parts == 1) each element rounded to bf16.
inline void Bf16PairWords(const float* src, int64_t n, int parts, __m512i (&w)[3]) {
  using V = Avx512Bf16;
  __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
  if (src != nullptr) {
    x0 = V::LoadN(src, n);
    x1 = V::LoadN(src + 16, n - 16);
  }
  if (parts == 1) {
    w[0] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
    return;
  }
  __m512 s0[3], s1[3];
  SplitIntoBf16Parts(x0, s0);
  SplitIntoBf16Parts(x1, s1);
  for (int q = 0; q < 3; ++q) w[q] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(s1[q], s0[q]));
}

template <class Tiles>
struct AmxDotImpl {
  using V = Avx512Bf16;
  using Base = GemmImpl<V>;
  using Gemv = GemvImpl<V>;
  // Rows from which a call by size takes the tiles (see above: between the 4 rows measured
  // slower and the 16 measured faster; 8 itself was not measured).
  static constexpr int64_t kMinRows = 8;
  static constexpr int64_t kStep = 32;     // k per tile step (16 pairs)
  static constexpr int64_t kDepth = 2048;  // k per depth block (its packed rows fit the scratch)
  static constexpr int64_t kSteps = kDepth / kStep;
  static constexpr int kMaxParts = 3;
  static constexpr int64_t kTileWords = 256;  // one 16 x 64-byte tile
  // Scratch: 4 staged C tiles, 2 padded weight tiles, kMaxParts row blocks being packed, then
  // the packed activations of one depth block.
  static constexpr int64_t kStageWords = 4 * kTileWords;
  static constexpr int64_t kPadWords = 2 * kTileWords;
  static constexpr int64_t kRowBlockWords = kMaxParts * kTileWords;
  static constexpr int64_t kPackedOffset = kStageWords + kPadWords + kRowBlockWords;
  static constexpr int64_t kPackedWords = kGemmScratchFloats - kPackedOffset;
  static_assert(kSteps * kMaxParts * kTileWords <= kPackedWords);

  // Packed words of one 16-row chunk over a depth block.
  static constexpr int64_t ChunkWords(int parts) { return kSteps * parts * kTileWords; }

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }

  // The B tiles of g's rows (m <= 16) over depth [k0, k0 + kb): for step s and part q, tile
  // word [p][i] = the bf16 pair (part q of A[i, k0 + 32s + 2p], of the next k), zero past m and
  // past kb. row_block: kRowBlockWords of scratch.
  static void PackRows(const GemmArgs& g, int64_t k0, int64_t kb, int parts, uint32_t* row_block,
                       uint32_t* dst) {
    const int64_t steps = (kb + kStep - 1) / kStep;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t l = s * kStep;
      for (int64_t i = 0; i < 16; ++i) {
        __m512i w[kMaxParts];
        Bf16PairWords(i < g.m ? Gemv::ARow(g, i) + k0 + l : nullptr, kb - l, parts, w);
        for (int q = 0; q < parts; ++q) {
          _mm512_storeu_si512(row_block + q * kTileWords + 16 * i, w[q]);
        }
      }
      // Row i's word p to tile word [p][i].
      for (int q = 0; q < parts; ++q) {
        V::Transpose32(row_block + q * kTileWords, 64, dst + (s * parts + q) * kTileWords, 16);
      }
    }
  }

  // Weight rows [j, j + rows) (rows <= 16), depth [k, k + kk) (kk <= 32) as a zero-padded tile.
  static void PadTile(const uint16_t* b, int64_t ldb, int64_t j, int64_t rows, int64_t k,
                      int64_t kk, uint32_t* tile) {
    std::memset(tile, 0, kTileWords * sizeof(uint32_t));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(tile + 16 * r, b + (j + r) * ldb + k, static_cast<size_t>(kk) * sizeof(uint16_t));
    }
  }

  // C tiles [R][*] over `steps` steps for the weight tile pair at rows j (kTwo: both tiles) of
  // g's column range; ahead: request the next pair's rows.
  template <bool kTwo>
  static void TileSteps(const GemmArgs& g, int64_t j, int64_t valid_rows, int64_t k0,
                        int64_t steps, int parts, const uint32_t* packed, uint32_t* pad,
                        bool ahead) {
    const uint16_t* b = static_cast<const uint16_t*>(g.b);
    const int64_t stride = g.ldb * static_cast<int64_t>(sizeof(uint16_t));
    Tiles::template ZeroC<0, 0>();
    Tiles::template ZeroC<0, 1>();
    if constexpr (kTwo) {
      Tiles::template ZeroC<1, 0>();
      Tiles::template ZeroC<1, 1>();
    }
    const bool full_rows = valid_rows == (kTwo ? 32 : 16);
    // The next pair's weight rows in address order (its row segments one after the other, 32
    // lines a step, into L2), so that the hardware sees one stream as in the vector dot
    // products' row-by-row walk: demand tile loads alone read 32 rows a line at a time each,
    // too few lines in flight (on the Xeon, one row 0.75x the dot products with the next pairs'
    // lines requested in the loads' order, 1.0x in address order).
    const int64_t ahead_row = j + 32;
    const int64_t ahead_rows = ahead ? Lo(32, g.n_end - ahead_row) : 0;
    int64_t ahead_r = 0, ahead_line = 0;  // the next line to request: row, 64-byte line
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = k0 + s * kStep;
      const int64_t kk = Lo(kStep, g.k - k);
      for (int t = 0; t < 32 && ahead_r < ahead_rows; ++t) {
        __builtin_prefetch(b + (ahead_row + ahead_r) * g.ldb + k0 + ahead_line * kStep, 0, 2);
        if (++ahead_line == steps) {
          ahead_line = 0;
          ++ahead_r;
        }
      }
      if (full_rows && kk == kStep) {
        Tiles::template LoadA<0>(reinterpret_cast<const uint32_t*>(b + j * g.ldb + k), stride);
        if constexpr (kTwo) {
          Tiles::template LoadA<1>(reinterpret_cast<const uint32_t*>(b + (j + 16) * g.ldb + k),
                                   stride);
        }
      } else {
        PadTile(b, g.ldb, j, Lo(16, valid_rows), k, kk, pad);
        Tiles::template LoadA<0>(pad, 64);
        if constexpr (kTwo) {
          PadTile(b, g.ldb, j + 16, valid_rows - 16, k, kk, pad + kTileWords);
          Tiles::template LoadA<1>(pad + kTileWords, 64);
        }
      }
      const uint32_t* x = packed + s * parts * kTileWords;
      Tiles::template LoadB<0>(x, 64);
      if (parts == 1) {
        Tiles::template Dot<0, 0>();
        if constexpr (kTwo) Tiles::template Dot<1, 0>();
        continue;
      }
      // hi into C[.][0], mid into C[.][1], then lo into C[.][0].
      Tiles::template LoadB<1>(x + kTileWords, 64);
      Tiles::template Dot<0, 0>();
      Tiles::template Dot<0, 1>();
      if constexpr (kTwo) {
        Tiles::template Dot<1, 0>();
        Tiles::template Dot<1, 1>();
      }
      Tiles::template LoadB<0>(x + 2 * kTileWords, 64);
      Tiles::template Dot<0, 0>();
      if constexpr (kTwo) Tiles::template Dot<1, 0>();
    }
  }

  // C's rows x columns [j, j + valid_cols) (+)= the staged tiles, transposed: weight tile t's
  // sum is stage tile 2t (hi and lo parts) plus stage tile 2t + 1 (mid).
  static void AddStage(const GemmArgs& g, int64_t j, int64_t valid_cols, bool acc,
                       uint32_t* stage) {
    float* f = reinterpret_cast<float*>(stage);
    for (int64_t t = 0; t < 2 && 16 * t < valid_cols; ++t) {
      float* c0 = f + 2 * t * kTileWords;
      const float* c1 = c0 + kTileWords;
      for (int r = 0; r < 16; ++r) {
        V::Store(c0 + 16 * r, V::Add(V::Load(c0 + 16 * r), V::Load(c1 + 16 * r)));
      }
      uint32_t* out = stage + (2 * t + 1) * kTileWords;
      V::Transpose32(c0, 64, out, 16);
      const int64_t cnt = Lo(16, valid_cols - 16 * t);
      for (int64_t i = 0; i < g.m; ++i) {
        float* dst = Gemv::CRow(g, i) + j + 16 * t;
        const __m512 v = V::Load(reinterpret_cast<const float*>(out) + 16 * i);
        V::StoreN(dst, acc ? V::Add(v, V::LoadN(dst, cnt)) : v, cnt);
      }
    }
  }

  // C rows i < m (any m >= 1), columns [n_begin, n_end) (and the repeated range).
  // scratch: kGemmScratchFloats.
  static void Run(const GemmArgs& g, float* scratch) {
    const int parts = g.a_bf16 ? 1 : kMaxParts;
    const int64_t group = kPackedWords / ChunkWords(parts) * 16;
    Tiles::Configure();
    for (int64_t i0 = 0; i0 < g.m; i0 += group) {
      RunGroup(Gemv::Rows(g, i0, Lo(group, g.m - i0)), parts, scratch);
    }
    Tiles::Release();
  }

  // Run for rows whose chunks' packed words fit the scratch together.
  static void RunGroup(const GemmArgs& g, int parts, float* scratch) {
    uint32_t* words = reinterpret_cast<uint32_t*>(scratch);
    uint32_t* stage = words;
    uint32_t* pad = stage + kStageWords;
    uint32_t* row_block = pad + kPadWords;
    uint32_t* packed = words + kPackedOffset;
    const int64_t chunks = (g.m + 15) / 16;
    auto chunk_rows = [&](int64_t c) { return Gemv::Rows(g, 16 * c, Lo(16, g.m - 16 * c)); };
    for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
      const int64_t kb = Lo(kDepth, g.k - k0);
      const int64_t steps = (kb + kStep - 1) / kStep;
      const bool acc = g.accumulate || k0 > 0;
      for (int64_t c = 0; c < chunks; ++c) {
        PackRows(chunk_rows(c), k0, kb, parts, row_block, packed + c * ChunkWords(parts));
      }
      Base::EachRange(g, [&](const GemmArgs& range) {
        for (int64_t j = range.n_begin; j < range.n_end; j += 32) {
          const int64_t cols = Lo(32, range.n_end - j);
          for (int64_t c = 0; c < chunks; ++c) {
            const uint32_t* x = packed + c * ChunkWords(parts);
            if (cols > 16) {
              TileSteps<true>(range, j, cols, k0, steps, parts, x, pad, c == 0);
              Tiles::template StoreC<1, 0>(reinterpret_cast<float*>(stage + 2 * kTileWords), 64);
              Tiles::template StoreC<1, 1>(reinterpret_cast<float*>(stage + 3 * kTileWords), 64);
            } else {
              TileSteps<false>(range, j, cols, k0, steps, parts, x, pad, c == 0);
            }
            Tiles::template StoreC<0, 0>(reinterpret_cast<float*>(stage), 64);
            Tiles::template StoreC<0, 1>(reinterpret_cast<float*>(stage + kTileWords), 64);
            AddStage(chunk_rows(c), j, cols, acc, stage);
          }
        }
      });
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_AMX_DOT_IMPL_H_
