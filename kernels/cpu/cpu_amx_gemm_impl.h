// The packed GEMM on AMX tiles, over a tile policy (HardwareTiles or EmulatedTiles, see
// cpu_amx_tiles.h). Include only from files compiled with the AMX flags (*_amx.cc).
//
// Which calls: bf16 weights on the packed path (more rows of A than the dot-product path
// takes, or GemmPath::kPacked): prompt GEMMs, MoE experts with many rows, prefill attention
// over a bf16 cache. Calls by size of 8-16 rows and GemmPath::kFixedTiles against bf16 weights
// go to the tiles of cpu_amx_dot_impl.h; everything else to the AVX-512 BF16 build unchanged.
//
// Exactness: TDPBF16PS multiplies bf16 by bf16, which is exact in f32, and accumulates in f32.
// With bf16 activations (GemmArgs::a_bf16) A is rounded to bf16 once, as every build does.
// With f32 activations each element of A is split exactly into three bf16 parts,
// a = hi + mid + lo (SplitIntoBf16Parts), and C accumulates hi·B, mid·B and lo·B: the f32
// products of the other builds, three tile products per step instead of one. Accuracy is that of f32 accumulation
// over k (the order differs from the other builds, as theirs differ from each other); a row's
// result does not depend on the other rows of the call (batch invariance holds).
//
// Blocking: A blocks of kMc rows x kKc depth are packed as bf16 pairs (one plane per part,
// rows padded to 16 and pairs to a multiple of 16 with zeros); each 32-column B panel is the
// bf16-pair panel of the AVX-512 build (cpu_gemm_impl.h), which is already the layout a B tile
// reads (16 columns' pairs per row, one row per pair of k), zero-padded the same way. Two row
// tiles x two column tiles of C (32 x 32 f32) stay in tile registers for a whole depth block,
// then are added into C through a 4 KiB staging block.
#ifndef MLASERVE_KERNELS_CPU_CPU_AMX_GEMM_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_AMX_GEMM_IMPL_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_amx_dot_impl.h"
#include "kernels/cpu/cpu_amx_tiles.h"
#include "kernels/cpu/cpu_avx512_traits.h"
#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::cpu_impl {

template <class Tiles>
struct AmxGemmImpl {
  using V = Avx512Bf16;
  using Base = GemmImpl<V>;
  using Gemv = GemvImpl<V>;
  static constexpr int64_t kTilePairs = 16;  // pairs of k per tile step (the rows of a B tile)
  static constexpr int64_t kNr = Base::kNr;  // panel columns: two B tiles
  static_assert(kNr == 2 * 16);
  static constexpr int64_t kKc = 512;                  // depth block
  static constexpr int64_t kPairs = kKc / 2;           // pairs per depth block
  static constexpr int64_t kMc = 256;                  // rows per A block
  static constexpr int64_t kAPitch = kPairs + 16;      // words per packed A row
  static constexpr int kMaxParts = 3;
  static constexpr int64_t kPlaneWords = kMc * kAPitch;
  static constexpr int64_t kStageFloats = 4 * 16 * 16;  // the four C tiles
  static_assert(kMaxParts * kPlaneWords + kPairs * kNr + kStageFloats <= kGemmScratchFloats);

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }
  static int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

  // Plane q, row i, word p: the bf16 pair (part q of A[i0 + i, pc + 2p], of A[.., pc + 2p + 1]),
  // for i < rows_padded and p < pairs_padded; zero past mc rows and past kc.
  static void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t rows_padded, int64_t pc,
                    int64_t kc, int64_t pairs_padded, int parts, uint32_t* planes) {
    for (int64_t i = 0; i < rows_padded; ++i) {
      const float* src = i < mc ? Gemv::ARow(g, i0 + i) + pc : nullptr;
      for (int64_t p = 0; p < pairs_padded; p += 16) {
        const int64_t l = 2 * p;  // 32 elements of k from here
        __m512i w[kMaxParts];
        Bf16PairWords(src != nullptr ? src + l : nullptr, kc - l, parts, w);
        for (int q = 0; q < parts; ++q) {
          _mm512_storeu_si512(planes + q * kPlaneWords + i * kAPitch + p, w[q]);
        }
      }
    }
  }

  // C tiles of rows [ir, ir + 16 * (1 + kTwo)) += A planes · panel, over `steps` tile steps.
  template <bool kTwo>
  static void TileRows(int64_t steps, int parts, const uint32_t* a, const uint32_t* bp,
                       float* stage) {
    constexpr int64_t kAStride = kAPitch * 4, kBStride = kNr * 4;
    Tiles::template ZeroC<0, 0>();
    Tiles::template ZeroC<0, 1>();
    if constexpr (kTwo) {
      Tiles::template ZeroC<1, 0>();
      Tiles::template ZeroC<1, 1>();
    }
    for (int64_t s = 0; s < steps; ++s) {
      const uint32_t* b = bp + s * kTilePairs * kNr;
      Tiles::template LoadB<0>(b, kBStride);
      Tiles::template LoadB<1>(b + 16, kBStride);
      for (int q = 0; q < parts; ++q) {
        const uint32_t* as = a + q * kPlaneWords + s * kTilePairs;
        Tiles::template LoadA<0>(as, kAStride);
        Tiles::template Dot<0, 0>();
        Tiles::template Dot<0, 1>();
        if constexpr (kTwo) {
          Tiles::template LoadA<1>(as + 16 * kAPitch, kAStride);
          Tiles::template Dot<1, 0>();
          Tiles::template Dot<1, 1>();
        }
      }
    }
    Tiles::template StoreC<0, 0>(stage, 64);
    Tiles::template StoreC<0, 1>(stage + 256, 64);
    if constexpr (kTwo) {
      Tiles::template StoreC<1, 0>(stage + 512, 64);
      Tiles::template StoreC<1, 1>(stage + 768, 64);
    }
  }

  // C rows [row0, row0 + rows) x columns [jr, jr + nr) (+)= the staged tiles.
  static void AddStage(const GemmArgs& g, int64_t row0, int64_t rows, int64_t jr, int64_t nr,
                       bool acc, const float* stage) {
    for (int64_t i = 0; i < rows; ++i) {
      float* c = Gemv::CRow(g, row0 + i) + jr;
      const int64_t r = i / 16, m = i % 16;
      for (int64_t cb = 0; cb < 2; ++cb) {
        const int64_t cnt = nr - 16 * cb;
        if (cnt <= 0) break;
        const __m512 v = V::Load(stage + (2 * r + cb) * 256 + m * 16);
        float* dst = c + 16 * cb;
        V::StoreN(dst, acc ? V::Add(v, V::LoadN(dst, cnt)) : v, cnt);
      }
    }
  }

  static void Packed(const GemmArgs& g, float* scratch) {
    const int parts = g.a_bf16 ? 1 : kMaxParts;
    uint32_t* planes = reinterpret_cast<uint32_t*>(scratch);
    uint32_t* bp = planes + kMaxParts * kPlaneWords;
    float* stage = reinterpret_cast<float*>(bp + kPairs * kNr);
    const uint16_t* b = static_cast<const uint16_t*>(g.b);
    Tiles::Configure();
    for (int64_t ic = 0; ic < g.m; ic += kMc) {
      const int64_t mc = Lo(kMc, g.m - ic);
      const int64_t rows_padded = RoundUp(mc, 16);
      for (int64_t pc = 0; pc < g.k; pc += kKc) {
        const int64_t kc = Lo(kKc, g.k - pc);
        const int64_t pairs = (kc + 1) / 2;
        const int64_t pairs_padded = RoundUp(pairs, kTilePairs);
        const bool acc = g.accumulate || pc > 0;
        PackA(g, ic, mc, rows_padded, pc, kc, pairs_padded, parts, planes);
        Base::EachRange(g, [&](const GemmArgs& range) {
          for (int64_t jr = range.n_begin; jr < range.n_end; jr += kNr) {
            const int64_t nr = Lo(kNr, range.n_end - jr);
            Base::PackPanel(b + jr * g.ldb + pc, g.ldb, nr, Lo(kNr, range.n_end - jr - nr), kc,
                            bp);
            std::memset(bp + pairs * kNr, 0, (pairs_padded - pairs) * kNr * sizeof(uint32_t));
            const int64_t steps = pairs_padded / kTilePairs;
            for (int64_t ir = 0; ir < mc; ir += 32) {
              const uint32_t* a = planes + ir * kAPitch;
              if (mc - ir > 16) {
                TileRows<true>(steps, parts, a, bp, stage);
              } else {
                TileRows<false>(steps, parts, a, bp, stage);
              }
              AddStage(g, ic + ir, Lo(32, mc - ir), jr, nr, acc, stage);
            }
          }
        });
      }
    }
    Tiles::Release();
  }

  // bf16 weights: rows on the packed path here, GemmPath::kFixedTiles and calls by size of
  // AmxDotImpl::kMinRows or more rows on AmxDotImpl's tiles; the rest, f32 weights and empty
  // calls: the AVX-512 BF16 build (kFixedTiles there as kFixedDot).
  static void Run(const GemmArgs& g, float* scratch) {
    if (g.b_dtype != DType::kBF16 || g.m <= 0 || g.k <= 0 || g.n_begin >= g.n_end) {
      GemmArgs base = g;
      if (base.path == GemmPath::kFixedTiles) base.path = GemmPath::kFixedDot;
      Base::Run(base, scratch);
    } else if (Base::PackedPath(g)) {
      Packed(g, scratch);
    } else if (g.path == GemmPath::kFixedTiles ||
               (g.path == GemmPath::kBySize && g.m >= AmxDotImpl<Tiles>::kMinRows)) {
      AmxDotImpl<Tiles>::Run(g, scratch);
    } else {
      Base::Run(g, scratch);
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_AMX_GEMM_IMPL_H_
