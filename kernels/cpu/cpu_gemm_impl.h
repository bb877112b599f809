// The GEMM primitives of CpuKernels, written once over a SIMD traits type V and instantiated by
// each ISA file (cpu_kernels_{avx512,avx2,scalar}.cc) with its own V. Include only there: the
// code is compiled with that file's -m flags. V lives in an anonymous namespace in each file, so
// every instantiation below has internal linkage and no ISA's code can leak into another.
//
// V provides: F (a vector of kW floats), Zero, Set1, Load/LoadN (f32 or bf16 source, LoadN
// zero-fills lanes >= n), Store/StoreN, Add, Fma(a, b, c) = a * b + c, ReduceAdd (and
// optionally ReduceAddLanes: kW of them at once, the same sums bit for bit),
// LoadBf16Pairs (kW 32-bit words, each two bf16 of consecutive k, split into the even-k and
// odd-k f32 vectors), Transpose32 (a kW x kW transpose of 32-bit words), the blocking
// constants kGemmMr and kGemmNv, and kRegisters (vector registers, which bound the tiles).
// Optionally the bf16 dot product: Words, LoadWords, StoreWords, Set1Word, LoadBf16/LoadBf16N,
// RoundPair and DotBf16 (see Avx512Bf16), used for bf16 activations against bf16 weights by
// the packed path and by cpu_dot_bf16_impl.h.
#ifndef MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/cpu_dot_bf16_impl.h"
#include "kernels/cpu/cpu_gemv_impl.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::cpu_impl {

// Packed GEMM for more rows of A than GemvImpl takes: A blocks are copied, B panels transposed
// so that a micro-tile of kMr rows x kNr columns loads kNv vectors of B and kMr broadcasts of
// A per step of k. A bf16 panel keeps its two-byte elements, interleaved by pairs of k (one
// 32-bit word per column and pair, as the bf16 row holds them): packing moves half the bytes
// of an f32 panel and the micro-kernel widens each word into two f32 vectors with one shift
// and one mask. Accumulation is f32 and exact products, as with f32 weights.
template <class V>
struct GemmImpl {
  using F = typename V::F;
  using Gemv = GemvImpl<V>;
  static constexpr int kW = V::kW;
  static constexpr int kNv = V::kGemmNv;  // vectors per micro-tile row
  static constexpr int kNr = kW * kNv;    // micro-tile columns (the packed B panel width)
  static constexpr int kMr = V::kGemmMr;  // micro-tile rows, one broadcast of A each
  // One kKc x kNr B panel (32 KiB of bf16 pairs with AVX-512, L1) is swept by every
  // micro-tile of a kMc-row block of A, so a 512-token prefill packs each weight panel once;
  // a deep kKc halves the read-modify-write passes over C. Chosen by measurement on this
  // Zen-class host: 256/256 and 384/512 were 10-15 % slower, 768/256 no faster.
  static constexpr int64_t kKc = 512;
  static constexpr int64_t kMc = 512;
  // Row pitch of the packed A block: one cache line more than kKc, so that the rows a
  // micro-tile reads together fall in different L1 sets instead of four.
  static constexpr int64_t kAStride = kKc + 16;
  static_assert(kMc * kAStride + kKc * kNr <= kGemmScratchFloats);
  static constexpr bool kHasDotBf16 = requires { &V::DotBf16; };
  // Whether a bf16-pair step (MicroPairs with f32 A: accumulators, even-k and odd-k B vectors,
  // two broadcasts) needs more than the registers: with AVX2, 12 + 4 + 2 of 16. Such a build
  // widens each bf16 panel to f32 as it packs it and runs the f32 micro-kernel (12 + 2 + 1).
  // With MLASERVE_CPU_ISA=avx2 on the Zen 4 host (docs/performance.md), the 512-row prompt
  // GEMMs went from 131-143 GFLOP/s with the spilling pair kernel to 170-202. Either way each
  // accumulator adds its products in k order, so the results are the same.
  static constexpr bool kWidenBf16Panels = kMr * kNv + 2 * kNv + 2 > V::kRegisters;
  // Where a widened panel's bf16 pairs are packed first: after the f32 panel.
  static constexpr int64_t kPairsOffset = kMc * kAStride + kKc * kNr;
  static_assert(!kWidenBf16Panels || kPairsOffset + kKc / 2 * kNr <= kGemmScratchFloats);

  // PA: the packed A element (f32, or uint32_t bf16 pairs for the dot product); P: the packed
  // B panel element.
  template <class PA, class P>
  using MicroFn = void (*)(int64_t kc, const PA* ap, const P* bp, float* const* c, int64_t nr,
                           bool acc);

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }

  // ap[i * kAStride + l] = A[i0 + i, pc + l]: plain row copies, so that the micro-kernel
  // reaches every row of a tile at a constant offset from one pointer. An odd kc gets a zero
  // after it, the partner of the zero that pads the last bf16 pair.
  static void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t pc, int64_t kc,
                    float* ap) {
    Gemv::CopyA(g, i0, mc, pc, kc, ap, kAStride);
    if (kc % 2 != 0) {
      for (int64_t i = 0; i < mc; ++i) ap[i * kAStride + kc] = 0.0f;
    }
  }

  // For the dot product: ap[i * kAStride + p] = bf16(A[i0 + i, pc + 2p]) |
  // bf16(A[i0 + i, pc + 2p + 1]) << 16, the same pairing as the bf16 B panel; an odd kc pairs
  // the last element with zero.
  static void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t pc, int64_t kc,
                    uint32_t* ap) {
    for (int64_t i = 0; i < mc; ++i) {
      const float* src = Gemv::ARow(g, i0 + i) + pc;
      uint32_t* dst = ap + i * kAStride;
      int64_t p = 0;
      for (; 2 * p + 1 < kc; ++p) {
        dst[p] = F32ToBf16(src[2 * p]) | static_cast<uint32_t>(F32ToBf16(src[2 * p + 1])) << 16;
      }
      if (2 * p < kc) dst[p] = F32ToBf16(src[2 * p]);
    }
  }

  // Requests the same columns of the next panel's rows (into L2) while this panel is packed:
  // the weights come from memory, and one panel ahead covers its latency.
  template <class TB>
  static void PrefetchNext(const TB* b, int64_t ldb, int64_t next_nr, int64_t kc) {
    constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(TB));
    for (int64_t j = 0; j < next_nr; ++j) {
      for (int64_t l = 0; l < kc; l += kLine) __builtin_prefetch(b + (kNr + j) * ldb + l, 0, 2);
    }
  }

  // f32 weights: bp[l * kNr + j] = B[j, l] for j < nr, 0 for nr <= j < kNr.
  static void PackPanel(const float* b, int64_t ldb, int64_t nr, int64_t next_nr, int64_t kc,
                        float* bp) {
    PrefetchNext(b, ldb, next_nr, kc);
    const int64_t full_rows = nr / kW * kW;
    auto scalar = [&](int64_t l0, int64_t l1, int64_t j0) {
      for (int64_t l = l0; l < l1; ++l) {
        for (int64_t j = j0; j < kNr; ++j) bp[l * kNr + j] = j < nr ? b[j * ldb + l] : 0.0f;
      }
    };
    int64_t l0 = 0;
    for (; l0 + kW <= kc; l0 += kW) {
      for (int64_t j0 = 0; j0 < full_rows; j0 += kW) {
        V::Transpose32(b + j0 * ldb + l0, ldb * 4, bp + l0 * kNr + j0, kNr);
      }
      scalar(l0, l0 + kW, full_rows);
    }
    scalar(l0, kc, 0);
  }

  // bf16 weights: bp[p * kNr + j] = B[j, 2p] | B[j, 2p + 1] << 16, zero past kc and for
  // nr <= j < kNr.
  static void PackPanel(const uint16_t* b, int64_t ldb, int64_t nr, int64_t next_nr,
                        int64_t kc, uint32_t* bp) {
    PrefetchNext(b, ldb, next_nr, kc);
    const int64_t full_rows = nr / kW * kW;
    auto scalar = [&](int64_t p0, int64_t p1, int64_t j0) {
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t j = j0; j < kNr; ++j) {
          uint32_t word = 0;
          if (j < nr) {
            word = b[j * ldb + 2 * p];
            if (2 * p + 1 < kc) word |= static_cast<uint32_t>(b[j * ldb + 2 * p + 1]) << 16;
          }
          bp[p * kNr + j] = word;
        }
      }
    };
    int64_t p0 = 0;
    for (; 2 * (p0 + kW) <= kc; p0 += kW) {
      for (int64_t j0 = 0; j0 < full_rows; j0 += kW) {
        V::Transpose32(b + j0 * ldb + 2 * p0, ldb * 2, bp + p0 * kNr + j0, kNr);
      }
      scalar(p0, p0 + kW, full_rows);
    }
    scalar(p0, (kc + 1) / 2, 0);
  }

  // bf16 weights widened: bp[l * kNr + j] = B[j, l] as f32, zero past kc and for
  // nr <= j < kNr. `pairs` holds the bf16-pair panel on the way (kKc / 2 * kNr words).
  static void PackPanel(const uint16_t* b, int64_t ldb, int64_t nr, int64_t next_nr,
                        int64_t kc, float* bp, uint32_t* pairs) {
    PackPanel(b, ldb, nr, next_nr, kc, pairs);
    for (int64_t p = 0; p < (kc + 1) / 2; ++p) {
      for (int v = 0; v < kNv; ++v) {
        F even, odd;
        V::LoadBf16Pairs(pairs + p * kNr + v * kW, even, odd);
        V::Store(bp + 2 * p * kNr + v * kW, even);
        if (2 * p + 1 < kc) V::Store(bp + (2 * p + 1) * kNr + v * kW, odd);
      }
    }
  }

  // C tile (+)= r; nr < kNr masks the last columns.
  template <int MR>
  [[gnu::always_inline]] static inline void StoreTile(F (&r)[MR][kNv], float* const* c,
                                                      int64_t nr, bool acc) {
    if (nr == kNr) {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
        for (int v = 0; v < kNv; ++v) {
          float* dst = c[i] + v * kW;
          V::Store(dst, acc ? V::Add(r[i][v], V::Load(dst)) : r[i][v]);
        }
      }
      return;
    }
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < kNv; ++v) {
        const int64_t cnt = nr - v * kW;
        float* dst = c[i] + v * kW;
        V::StoreN(dst, acc ? V::Add(r[i][v], V::LoadN(dst, cnt)) : r[i][v], cnt);
      }
    }
  }

  // The C tile is read and written once per depth block; fetching it first hides the miss
  // behind the k loop.
  template <int MR>
  [[gnu::always_inline]] static inline void PrefetchTile(float* const* c) {
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < kNv; ++v) __builtin_prefetch(c[i] + v * kW, 1);
    }
  }

  template <int MR>
  [[gnu::always_inline]] static inline void ZeroTile(F (&r)[MR][kNv]) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) r[i][v] = V::Zero();
    }
  }

  template <int MR>
  static void Micro(int64_t kc, const float* ap, const float* bp, float* const* c, int64_t nr,
                    bool acc) {
    PrefetchTile<MR>(c);
    F r[MR][kNv];
    ZeroTile<MR>(r);
    for (int64_t l = 0; l < kc; ++l) {
      F b[kNv];
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) b[v] = V::Load(bp + l * kNr + v * kW);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const F a = V::Set1(ap[i * kAStride + l]);
#pragma GCC unroll 4
        for (int v = 0; v < kNv; ++v) r[i][v] = V::Fma(a, b[v], r[i][v]);
      }
    }
    StoreTile<MR>(r, c, nr, acc);
  }

  // A bf16-pair B panel. PA = float: each word is widened into its even-k and odd-k f32
  // vectors, two FMAs per row of A. PA = uint32_t (bf16 pairs of A, builds with DotBf16): one
  // DotBf16 per row of A.
  template <int MR, class PA>
  static void MicroPairs(int64_t kc, const PA* ap, const uint32_t* bp, float* const* c,
                         int64_t nr, bool acc) {
    PrefetchTile<MR>(c);
    F r[MR][kNv];
    ZeroTile<MR>(r);
    const int64_t pairs = (kc + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t* words = bp + p * kNr;
      if constexpr (std::is_same_v<PA, uint32_t>) {
        typename V::Words b[kNv];
#pragma GCC unroll 4
        for (int v = 0; v < kNv; ++v) b[v] = V::LoadWords(words + v * kW);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const typename V::Words a = V::Set1Word(ap[i * kAStride + p]);
#pragma GCC unroll 4
          for (int v = 0; v < kNv; ++v) r[i][v] = V::DotBf16(r[i][v], a, b[v]);
        }
      } else {
        F even[kNv], odd[kNv];
#pragma GCC unroll 4
        for (int v = 0; v < kNv; ++v) V::LoadBf16Pairs(words + v * kW, even[v], odd[v]);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const F a0 = V::Set1(ap[i * kAStride + 2 * p]);
          const F a1 = V::Set1(ap[i * kAStride + 2 * p + 1]);
#pragma GCC unroll 4
          for (int v = 0; v < kNv; ++v) {
            r[i][v] = V::Fma(a1, odd[v], V::Fma(a0, even[v], r[i][v]));
          }
        }
      }
    }
    StoreTile<MR>(r, c, nr, acc);
  }

  template <class PA, class P, size_t... I>
  static MicroFn<PA, P> MicroFor(int64_t mr, std::index_sequence<I...>) {
    if constexpr (std::is_same_v<P, uint32_t>) {
      static constexpr MicroFn<PA, P> kTable[] = {&MicroPairs<static_cast<int>(I) + 1, PA>...};
      return kTable[mr - 1];
    } else {
      static constexpr MicroFn<PA, P> kTable[] = {&Micro<static_cast<int>(I) + 1>...};
      return kTable[mr - 1];
    }
  }

  // Whether Run takes the packed micro-kernels for g (rather than dot products).
  static bool PackedPath(const GemmArgs& g) {
    return g.path == GemmPath::kPacked || (g.path == GemmPath::kBySize && g.m > Gemv::kMaxM);
  }

  // Runs `run` over g's column range and, when g.n_repeat > 0, over the repeated range, each
  // as a call without a repeat.
  template <class Run>
  static void EachRange(GemmArgs g, Run&& run) {
    const int64_t repeat = g.n_repeat;
    g.n_repeat = 0;
    run(g);
    if (repeat > 0) {
      g.n_begin += repeat;
      g.n_end += repeat;
      run(g);
    }
  }

  // TB: the weight element type; P: its packed panel element (float, or uint32_t bf16 pairs);
  // PA: the packed A element (float, or uint32_t bf16 pairs for DotBf16).
  template <class TB, class P, class PA>
  static void Packed(const GemmArgs& g, float* scratch) {
    static_assert(sizeof(PA) == sizeof(float));
    PA* ap = reinterpret_cast<PA*>(scratch);
    P* bp = reinterpret_cast<P*>(scratch + kMc * kAStride);
    const TB* b = static_cast<const TB*>(g.b);
    for (int64_t ic = 0; ic < g.m; ic += kMc) {
      const int64_t mc = Lo(kMc, g.m - ic);
      // Equal tile heights (differing by at most one) keep every tile near kMr rows.
      const int64_t tiles = (mc + kMr - 1) / kMr;
      for (int64_t pc = 0; pc < g.k; pc += kKc) {
        const int64_t kc = Lo(kKc, g.k - pc);
        const bool acc = g.accumulate || pc > 0;
        PackA(g, ic, mc, pc, kc, ap);
        EachRange(g, [&](const GemmArgs& range) {
          for (int64_t jr = range.n_begin; jr < range.n_end; jr += kNr) {
            const int64_t nr = Lo(kNr, range.n_end - jr);
            const int64_t next_nr = Lo(kNr, range.n_end - jr - nr);
            if constexpr (std::is_same_v<TB, uint16_t> && std::is_same_v<P, float>) {
              PackPanel(b + jr * g.ldb + pc, g.ldb, nr, next_nr, kc, bp,
                        reinterpret_cast<uint32_t*>(scratch + kPairsOffset));
            } else {
              PackPanel(b + jr * g.ldb + pc, g.ldb, nr, next_nr, kc, bp);
            }
            int64_t ir = 0;
            for (int64_t t = 0; t < tiles; ++t) {
              const int64_t mr = mc / tiles + (t < mc % tiles ? 1 : 0);
              float* c[kMr];
              for (int64_t i = 0; i < mr; ++i) c[i] = Gemv::CRow(g, ic + ir + i) + jr;
              MicroFor<PA, P>(mr, std::make_index_sequence<kMr>())(kc, ap + ir * kAStride, bp,
                                                                    c, nr, acc);
              ir += mr;
            }
          }
        });
      }
    }
  }

  static void Run(const GemmArgs& g, float* scratch) {
    if (g.m <= 0 || g.n_begin >= g.n_end) return;
    if (g.n_repeat > 0 && (g.k == 0 || !PackedPath(g))) {
      EachRange(g, [&](const GemmArgs& range) { Run(range, scratch); });
      return;
    }
    if (g.k == 0) {
      if (g.accumulate) return;
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = g.n_begin; j < g.n_end; ++j) Gemv::CRow(g, i)[j] = 0.0f;
      }
      return;
    }
    if constexpr (kHasDotBf16) {
      if (DotBf16Impl<V>::Takes(g)) {
        DotBf16Impl<V>::Run(g, scratch);
        return;
      }
    }
    const bool bf16 = g.b_dtype == DType::kBF16;
    if (g.path == GemmPath::kFixedDot) {
      if (bf16) {
        Gemv::template RunFixed<uint16_t>(g, scratch);
      } else {
        Gemv::template RunFixed<float>(g, scratch);
      }
    } else if (!PackedPath(g)) {
      if (bf16) {
        Gemv::template Run<uint16_t>(g, scratch);
      } else {
        Gemv::template Run<float>(g, scratch);
      }
    } else if (bf16) {
      if constexpr (kHasDotBf16) {
        if (g.a_bf16) {
          Packed<uint16_t, uint32_t, uint32_t>(g, scratch);
          return;
        }
      }
      if constexpr (kWidenBf16Panels) {
        Packed<uint16_t, float, float>(g, scratch);
      } else {
        Packed<uint16_t, uint32_t, float>(g, scratch);
      }
    } else {
      Packed<float, float, float>(g, scratch);
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_
