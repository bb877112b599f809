// The GEMM primitives of CpuKernels, written once over a SIMD traits type V and instantiated by
// each ISA file (cpu_kernels_{avx512,avx2,scalar}.cc) with its own V. Include only there: the
// code is compiled with that file's -m flags. V lives in an anonymous namespace in each file, so
// every instantiation below has internal linkage and no ISA's code can leak into another.
//
// V provides: F (a vector of kW floats), Zero, Set1, Load/LoadN (f32 or bf16 source, LoadN
// zero-fills lanes >= n), Store/StoreN, Add, Fma(a, b, c) = a * b + c, ReduceAdd, PackTile
// (a kW x kW transpose into f32), and the blocking constants kGemmMr, kGemmNv, kGemvAcc.
#ifndef MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_

#include <cstdint>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::cpu_impl {

template <class V>
struct GemmImpl {
  using F = typename V::F;
  static constexpr int kW = V::kW;
  static constexpr int kNv = V::kGemmNv;  // vectors per micro-tile row
  static constexpr int kNr = kW * kNv;    // micro-tile columns (the packed B panel width)
  static constexpr int kMr = V::kGemmMr;  // micro-tile rows, one broadcast of A each
  // One kKc x kNr B panel (64 KiB with AVX-512, in L2) is swept by every micro-tile of a
  // kMc-row block of A, so a 512-token prefill packs each weight panel once; a deep kKc
  // halves the read-modify-write passes over C. Chosen by measurement on Zen 4/5-class cores:
  // 256/256 and 384/512 were 10-15 % slower, 768/256 no faster.
  static constexpr int64_t kKc = 512;
  static constexpr int64_t kMc = 512;
  // Row pitch of the packed A block: one cache line more than kKc, so that the rows a
  // micro-tile reads together fall in different L1 sets instead of four.
  static constexpr int64_t kAStride = kKc + 16;
  // Up to this many rows, B is streamed once through dot products instead of packed: packing
  // costs more than it saves when each B element is used by only a few rows.
  static constexpr int64_t kGemvMaxM = 16;
  static_assert(kMc * kAStride + kKc * kNr <= kGemmScratchFloats);

  using MicroFn = void (*)(int64_t kc, const float* ap, const float* bp, float* const* c,
                           int64_t nr, bool acc);

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }
  static float ToF32(float x) { return x; }
  // A local copy of Bf16ToF32: calling a shared inline function from here could hand its
  // out-of-line copy, compiled for this ISA, to the ISA-neutral code.
  static float ToF32(uint16_t x) {
    const uint32_t u = static_cast<uint32_t>(x) << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
  }

  static const float* ARow(const GemmArgs& g, int64_t i) {
    return g.a + (g.a_rows != nullptr ? g.a_rows[i] : i) * g.lda;
  }
  static float* CRow(const GemmArgs& g, int64_t i) {
    return g.c + (g.c_rows != nullptr ? g.c_rows[i] : i) * g.ldc;
  }

  // ap[i * kAStride + l] = A[i0 + i, pc + l]: plain row copies, so that the micro-kernel reaches
  // every row of a tile at a constant offset from one pointer.
  static void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t pc, int64_t kc,
                    float* ap) {
    for (int64_t i = 0; i < mc; ++i) {
      const float* src = ARow(g, i0 + i) + pc;
      float* dst = ap + i * kAStride;
      for (int64_t l = 0; l < kc; ++l) dst[l] = src[l];
    }
  }

  // bp[l * kNr + j] = B[j, l] as f32 for j < nr, 0 for nr <= j < kNr; b points at B[0, 0] of
  // the panel. The weights come from memory: the same columns of the next panel's next_nr rows
  // are requested (into L2) as this panel is read, one panel ahead of their use.
  template <class TB>
  static void PackB(const TB* b, int64_t ldb, int64_t nr, int64_t next_nr, int64_t kc,
                    float* bp) {
    constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(TB));
    for (int64_t j = 0; j < next_nr; ++j) {
      for (int64_t l = 0; l < kc; l += kLine) __builtin_prefetch(b + (kNr + j) * ldb + l, 0, 2);
    }
    const int64_t full_rows = nr / kW * kW;
    auto scalar_columns = [&](int64_t l0, int64_t l1, int64_t j0) {
      for (int64_t l = l0; l < l1; ++l) {
        for (int64_t j = j0; j < kNr; ++j) bp[l * kNr + j] = j < nr ? ToF32(b[j * ldb + l]) : 0.0f;
      }
    };
    int64_t l0 = 0;
    for (; l0 + kW <= kc; l0 += kW) {
      for (int64_t j0 = 0; j0 < full_rows; j0 += kW) {
        V::PackTile(b + j0 * ldb + l0, ldb, bp + l0 * kNr + j0, kNr);
      }
      scalar_columns(l0, l0 + kW, full_rows);
    }
    scalar_columns(l0, kc, 0);
  }

  template <int MR>
  static void Micro(int64_t kc, const float* ap, const float* bp, float* const* c, int64_t nr,
                    bool acc) {
    // The C tile is read and written once per depth block; fetching it now hides the miss
    // behind the k loop.
    for (int i = 0; i < MR; ++i) {
      for (int v = 0; v < kNv; ++v) __builtin_prefetch(c[i] + v * kW, 1);
    }
    F r[MR][kNv];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) r[i][v] = V::Zero();
    }
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

  template <size_t... I>
  static MicroFn MicroFor(int64_t mr, std::index_sequence<I...>) {
    static constexpr MicroFn kTable[] = {&Micro<static_cast<int>(I) + 1>...};
    return kTable[mr - 1];
  }

  template <class TB>
  static void Packed(const GemmArgs& g, float* scratch) {
    float* ap = scratch;
    float* bp = scratch + kMc * kAStride;
    const TB* b = static_cast<const TB*>(g.b);
    for (int64_t ic = 0; ic < g.m; ic += kMc) {
      const int64_t mc = Lo(kMc, g.m - ic);
      // Equal tile heights (differing by at most one) keep every tile near kMr rows.
      const int64_t tiles = (mc + kMr - 1) / kMr;
      for (int64_t pc = 0; pc < g.k; pc += kKc) {
        const int64_t kc = Lo(kKc, g.k - pc);
        const bool acc = g.accumulate || pc > 0;
        PackA(g, ic, mc, pc, kc, ap);
        for (int64_t jr = g.n_begin; jr < g.n_end; jr += kNr) {
          const int64_t nr = Lo(kNr, g.n_end - jr);
          PackB(b + jr * g.ldb + pc, g.ldb, nr, Lo(kNr, g.n_end - jr - nr), kc, bp);
          int64_t ir = 0;
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t mr = mc / tiles + (t < mc % tiles ? 1 : 0);
            float* c[kMr];
            for (int64_t i = 0; i < mr; ++i) c[i] = CRow(g, ic + ir + i) + jr;
            MicroFor(mr, std::make_index_sequence<kMr>())(kc, ap + ir * kAStride, bp, c, nr, acc);
            ir += mr;
          }
        }
      }
    }
  }

  // Rows [j, j + R) of C for the M rows of A: every B element is loaded once.
  template <class TB, int M, int R>
  static void GemvTile(const float* const* a, const TB* b, int64_t ldb, int64_t k,
                       float* const* c, int64_t j, bool acc) {
    F s[M][R];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) s[i][r] = V::Zero();
    }
    const TB* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = b + (j + r) * ldb;
    // Demand loads alone keep too few lines in flight to cover memory latency when the
    // arithmetic per line is high (several rows of A), so the same columns of the next R
    // weight rows are requested one tile ahead, into L2.
    const int64_t ahead = R * ldb;
    auto step = [&](int64_t l, auto load_b, auto load_a) {
      F bv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __builtin_prefetch(rows[r] + ahead + l, 0, 2);
        bv[r] = load_b(rows[r] + l);
      }
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        const F av = load_a(a[i] + l);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) s[i][r] = V::Fma(av, bv[r], s[i][r]);
      }
    };
    int64_t l = 0;
    for (; l + kW <= k; l += kW) {
      step(l, [](const TB* p) { return V::Load(p); }, [](const float* p) { return V::Load(p); });
    }
    if (l < k) {
      const int64_t n = k - l;
      step(l, [n](const TB* p) { return V::LoadN(p, n); },
           [n](const float* p) { return V::LoadN(p, n); });
    }
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) {
        const float v = V::ReduceAdd(s[i][r]);
        c[i][j + r] = acc ? c[i][j + r] + v : v;
      }
    }
  }

  template <class TB, int M>
  static void Gemv(const GemmArgs& g, float* scratch) {
    constexpr int kRows = V::kGemvAcc / M < 1 ? 1 : (V::kGemvAcc / M > 4 ? 4 : V::kGemvAcc / M);
    // Depth per pass: the M rows of A (32 KiB) stay in L1 while every weight row of the
    // thread streams past them once per pass; A read from L2 instead would limit the stream.
    // They are copied at a pitch of kDepth plus one cache line: rows of A (and B) a multiple
    // of 4 KiB apart would all compete for the same L1 sets.
    constexpr int64_t kDepth = (32 * 1024 / (4 * M)) / 64 * 64;
    constexpr int64_t kPitch = kDepth + 16;
    static_assert(M * kPitch <= kGemmScratchFloats);
    const float* a[M];
    float* c[M];
    const TB* b = static_cast<const TB*>(g.b);
    for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
      const int64_t kb = Lo(kDepth, g.k - k0);
      const bool acc = g.accumulate || k0 > 0;
      for (int i = 0; i < M; ++i) {
        const float* src = ARow(g, i) + k0;
        float* dst = scratch + i * kPitch;
        for (int64_t l = 0; l < kb; ++l) dst[l] = src[l];
        a[i] = dst;
        c[i] = CRow(g, i);
      }
      int64_t j = g.n_begin;
      for (; j + kRows <= g.n_end; j += kRows) {
        GemvTile<TB, M, kRows>(a, b + k0, g.ldb, kb, c, j, acc);
      }
      for (; j < g.n_end; ++j) GemvTile<TB, M, 1>(a, b + k0, g.ldb, kb, c, j, acc);
    }
  }

  template <class TB, size_t... I>
  static void GemvFor(const GemmArgs& g, float* scratch, std::index_sequence<I...>) {
    using Fn = void (*)(const GemmArgs&, float*);
    static constexpr Fn kTable[] = {&Gemv<TB, static_cast<int>(I) + 1>...};
    kTable[g.m - 1](g, scratch);
  }

  template <class TB>
  static void Typed(const GemmArgs& g, float* scratch) {
    if (g.m <= kGemvMaxM) {
      GemvFor<TB>(g, scratch, std::make_index_sequence<kGemvMaxM>());
    } else {
      Packed<TB>(g, scratch);
    }
  }

  static void Run(const GemmArgs& g, float* scratch) {
    if (g.m <= 0 || g.n_begin >= g.n_end) return;
    if (g.k == 0) {
      if (g.accumulate) return;
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = g.n_begin; j < g.n_end; ++j) CRow(g, i)[j] = 0.0f;
      }
      return;
    }
    if (g.b_dtype == DType::kBF16) {
      Typed<uint16_t>(g, scratch);
    } else {
      Typed<float>(g, scratch);
    }
  }

  // C[MR rows, nr <= kNr columns] += A · B, B read in place (converted as it is loaded);
  // kFull: nr == kNr, so no lane masks in the loop.
  template <class TB, int MR, bool kFull>
  static void NnTileOf(const GemmNnArgs& g, const TB* b, int64_t i0, int64_t j0, int64_t nr) {
    F r[MR][kNv];
    const float* a[MR];
    float* c[MR];
    for (int i = 0; i < MR; ++i) {
      a[i] = g.a + (i0 + i) * g.lda;
      c[i] = g.c + (i0 + i) * g.ldc + j0;
    }
    auto count = [nr](int v) { return nr - v * kW; };
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        r[i][v] = kFull ? V::Load(c[i] + v * kW) : V::LoadN(c[i] + v * kW, count(v));
      }
    }
    const TB* brow = b + j0;
    for (int64_t l = 0; l < g.k; ++l, brow += g.ldb) {
      F bv[kNv];
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        bv[v] = kFull ? V::Load(brow + v * kW) : V::LoadN(brow + v * kW, count(v));
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const F av = V::Set1(a[i][l]);
#pragma GCC unroll 4
        for (int v = 0; v < kNv; ++v) r[i][v] = V::Fma(av, bv[v], r[i][v]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        if (kFull) {
          V::Store(c[i] + v * kW, r[i][v]);
        } else {
          V::StoreN(c[i] + v * kW, r[i][v], count(v));
        }
      }
    }
  }

  template <class TB, int MR>
  static void NnTile(const GemmNnArgs& g, const TB* b, int64_t i0, int64_t j0, int64_t nr) {
    if (nr == kNr) {
      NnTileOf<TB, MR, true>(g, b, i0, j0, nr);
    } else {
      NnTileOf<TB, MR, false>(g, b, i0, j0, nr);
    }
  }

  template <class TB, size_t... I>
  static void NnTyped(const GemmNnArgs& g, std::index_sequence<I...>) {
    using Fn = void (*)(const GemmNnArgs&, const TB*, int64_t, int64_t, int64_t);
    static constexpr Fn kTable[] = {&NnTile<TB, static_cast<int>(I) + 1>...};
    const TB* b = static_cast<const TB*>(g.b);
    const int64_t tiles = (g.m + kMr - 1) / kMr;
    for (int64_t j0 = 0; j0 < g.n; j0 += kNr) {
      const int64_t nr = Lo(kNr, g.n - j0);
      int64_t i0 = 0;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t mr = g.m / tiles + (t < g.m % tiles ? 1 : 0);
        kTable[mr - 1](g, b, i0, j0, nr);
        i0 += mr;
      }
    }
  }

  static void RunNn(const GemmNnArgs& g) {
    if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
    if (g.b_dtype == DType::kBF16) {
      NnTyped<uint16_t>(g, std::make_index_sequence<kMr>());
    } else {
      NnTyped<float>(g, std::make_index_sequence<kMr>());
    }
  }
};

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_GEMM_IMPL_H_
