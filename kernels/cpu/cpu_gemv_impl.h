// The unpacked GEMM paths of CpuKernels over a SIMD traits type V (see cpu_gemm_impl.h for the
// rules of these headers): dot products for a few rows of A against weight rows streamed once
// (decode), and C += A · B over rows of B read in place (attention's value product).
#ifndef MLASERVE_KERNELS_CPU_CPU_GEMV_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_GEMV_IMPL_H_

#include <cstdint>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/dtype.h"

namespace mlaserve::cpu_impl {

template <class V>
struct GemvImpl {
  using F = typename V::F;
  static constexpr int kW = V::kW;
  static constexpr int kNv = V::kGemmNv;
  static constexpr int kNr = kW * kNv;
  static constexpr int kMr = V::kGemmMr;
  // Up to this many rows of A, B is streamed once through dot products instead of packed:
  // packing costs more than it saves when each B element is used by only a few rows.
  static constexpr int64_t kMaxM = 16;
  // bf16 weights on AVX-512 are read as words of two consecutive k (V::LoadBf16Pairs: a shift
  // and a mask widen 2 * kW of them) instead of kW at a time (a zero-extending shuffle and a
  // shift each), and the copy of A splits each block of kPairBlock elements into its even and
  // odd ones to match (CopyDotA): half the widening work per weight, which competes with the
  // FMAs once several rows of A make the tile compute-bound. On the Zen 4 host (two threads,
  // mlaserve-kernel-bench, three alternating rounds): BM_Gemm/16/* 158-172 -> 186-198 and
  // 158-166 -> 179-181 GFLOP/s, under MLASERVE_BENCH_DETERMINISTIC=1 164-175 -> 184-197 and
  // 173-176 -> 187-190, 8 rows 1.05x, one row unchanged (bandwidth-bound). With AVX2's 16
  // registers the pair halves leave a 4-row tile 2 weight rows where it has 3: 16 rows
  // 172-179 -> 141-145, so AVX2 widens kW at a time.
  template <class TB>
  static constexpr bool kPairs = sizeof(TB) == 2 && kW == 16;
  static constexpr int64_t kPairBlock = 2 * kW;

  static int64_t Lo(int64_t a, int64_t b) { return a < b ? a : b; }
  static const float* ARow(const GemmArgs& g, int64_t i) {
    return g.a + (g.a_rows != nullptr ? g.a_rows[i] : i) * g.lda;
  }
  static float* CRow(const GemmArgs& g, int64_t i) {
    return g.c + (g.c_rows != nullptr ? g.c_rows[i] : i) * g.ldc;
  }
  // g over its rows [i0, i0 + m) only.
  static GemmArgs Rows(GemmArgs g, int64_t i0, int64_t m) {
    if (g.a_rows != nullptr) {
      g.a_rows += i0;
    } else {
      g.a += i0 * g.lda;
    }
    if (g.c_rows != nullptr) {
      g.c_rows += i0;
    } else {
      g.c += i0 * g.ldc;
    }
    g.m = m;
    return g;
  }

  // Vectors that hold n floats.
  static constexpr int VectorsFor(int n) { return (n + kW - 1) / kW; }

  // C[i][j + r] (+)= V::ReduceAdd(x[i * R + r]) for i < M, r < R (a tile's sums), bit for
  // bit: a vector's worth at a time where the build has V::ReduceAddLanes (AVX-512); one at a
  // time, at a shallow depth (the per-head products of k = 128 and 512), they outweighed a
  // tile's products.
  template <int M, int R>
  [[gnu::always_inline]] static inline void StoreSums(const F (&x)[M * R], float* const* c,
                                                      int64_t j, bool acc) {
    alignas(64) float sums[VectorsFor(M * R) * kW];
    ReduceAll(x, sums);
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) {
        const float v = sums[i * R + r];
        c[i][j + r] = acc ? c[i][j + r] + v : v;
      }
    }
  }
  // sums[e] = V::ReduceAdd(x[e]) for e < N; sums holds VectorsFor(N) vectors.
  template <int N>
  [[gnu::always_inline]] static inline void ReduceAll(const F (&x)[N], float* sums) {
    if constexpr (N > 1 && requires(const F (&y)[kW]) { V::ReduceAddLanes(y); }) {
      ReduceGroups(x, sums, std::make_integer_sequence<int, VectorsFor(N)>());
    } else {
#pragma GCC unroll 16
      for (int e = 0; e < N; ++e) sums[e] = V::ReduceAdd(x[e]);
    }
  }
  template <int N, int... kQ>
  [[gnu::always_inline]] static inline void ReduceGroups(const F (&x)[N], float* sums,
                                                         std::integer_sequence<int, kQ...>) {
    (ReduceGroup<N, kW * kQ>(x, sums), ...);
  }
  template <int N, int kFirst>
  [[gnu::always_inline]] static inline void ReduceGroup(const F (&x)[N], float* sums) {
    F y[kW];
#pragma GCC unroll 16
    for (int e = 0; e < kW; ++e) y[e] = kFirst + e < N ? x[kFirst + e] : V::Zero();
    V::Store(sums + kFirst, V::ReduceAddLanes(y));
  }

  // Requests the line at p ahead of its use: into L2, or past the caches (non_temporal).
  [[gnu::always_inline]] static inline void PrefetchLine(const void* p, bool non_temporal) {
    if (non_temporal) {
      __builtin_prefetch(p, 0, 0);
    } else {
      __builtin_prefetch(p, 0, 2);
    }
  }

  // Rows [j, j + R) of C for the M rows of A: every B element is loaded once. Each output
  // element sums its products lane-wise in kChains accumulators (see Chains), which take
  // consecutive steps of k (kW elements, or a block of kPairBlock under kPairs<TB>: the even
  // product, then the odd one) in turn, the steps past the last whole turn and a partial one
  // going to the first; the chains are added pairwise at the end. The order of a sum depends
  // on kChains and k alone, not on M or R. Under kPairs<TB>, a holds CopyDotA's split rows.
  //
  // The lines requested ahead are `tuning.ahead_tiles` tiles of R rows of `span` elements on
  // (AheadSpan).
  template <class TB, int M, int R, int kChains = 1>
  static void GemvTile(const float* const* a, const TB* b, int64_t ldb, int64_t k,
                       float* const* c, int64_t j, bool acc, const StreamTuning& tuning,
                       int64_t span) {
    static_assert(kChains == 1 || kChains == 2 || kChains == 4);
    constexpr int U = kPairs<TB> ? 2 : 1;  // vectors of each operand per step
    constexpr int64_t kStep = U * kW;
    F s[M][R][kChains];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int q = 0; q < kChains; ++q) s[i][r][q] = V::Zero();
      }
    }
    const TB* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = b + (j + r) * ldb;
    // Demand loads alone keep too few lines in flight to cover memory latency when the
    // arithmetic per line is high (several rows of A), so the same columns of the weight rows
    // `tuning.ahead_tiles` tiles on are requested now. Non-temporal (on the AMD EPYC host where
    // it was measured: decode on lite-slice-4 41-42 -> 46-47 tok/s against the same prefetch
    // into L2) keeps each once-used weight line out of L2 and L3 for the activations and the
    // KV cache; which hint and distance suit a processor is chosen per host
    // (cpu_stream_tuning.h).
    const int64_t ahead = R * span * tuning.ahead_tiles;
    const bool prefetch = tuning.ahead_tiles > 0, nta = tuning.non_temporal;
    // load_b(p, v) fills v[0..U) from weights p; load_a(p, v) likewise from a row of A.
    auto step = [&](int64_t l, int q, auto load_b, auto load_a) {
      F bv[R][U];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        if (prefetch) PrefetchLine(rows[r] + ahead + l, nta);
        load_b(rows[r] + l, bv[r]);
      }
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        F av[U];
        load_a(a[i] + l, av);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
          for (int u = 0; u < U; ++u) s[i][r][q] = V::Fma(av[u], bv[r][u], s[i][r][q]);
        }
      }
    };
    auto load_b = [](const TB* p, F* v) {
      if constexpr (U == 2) {
        V::LoadBf16Pairs(reinterpret_cast<const uint32_t*>(p), v[0], v[1]);
      } else {
        v[0] = V::Load(p);
      }
    };
    auto load_a = [](const float* p, F* v) {
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) v[u] = V::Load(p + u * kW);
    };
    int64_t l = 0;
    for (; l + kChains * kStep <= k; l += kChains * kStep) {
#pragma GCC unroll 4
      for (int q = 0; q < kChains; ++q) step(l + q * kStep, q, load_b, load_a);
    }
    for (; l + kStep <= k; l += kStep) step(l, 0, load_b, load_a);
    if (l < k) {
      const int64_t n = k - l;
      if constexpr (U == 2) {
        // Weights zero-filled to a block; A's split copy is zero there already.
        step(l, 0, [n](const TB* p, F* v) {
          alignas(64) TB tail[kPairBlock] = {};
          __builtin_memcpy(tail, p, static_cast<size_t>(n) * sizeof(TB));
          V::LoadBf16Pairs(reinterpret_cast<const uint32_t*>(tail), v[0], v[1]);
        }, load_a);
      } else {
        step(l, 0, [n](const TB* p, F* v) { v[0] = V::LoadN(p, n); },
             [n](const float* p, F* v) { v[0] = V::LoadN(p, n); });
      }
    }
    F sum[M * R];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        F* t = s[i][r];
        if constexpr (kChains == 4) {
          t[0] = V::Add(t[0], t[1]);
          t[2] = V::Add(t[2], t[3]);
          t[0] = V::Add(t[0], t[2]);
        } else if constexpr (kChains == 2) {
          t[0] = V::Add(t[0], t[1]);
        }
        sum[i * R + r] = t[0];
      }
    }
    StoreSums<M, R>(sum, c, j, acc);
  }

  // Elements of each weight row that a tile of GemvTile's prefetch distance spans. Where the
  // walk goes pass by pass over every row, the whole row: the tile ahead is the next to read
  // the same columns. Where each row is read through at once (`through`: a single pass, or a
  // tile through all its passes), at most the probe's depth, so that `ahead_tiles` stays the
  // distance in bytes that the probe chose it for: counted in tiles of 10,944-deep rows, four
  // tiles of three were 262 KB ahead and the lines were gone before their use (on a Zen 3 EPYC
  // host, mlaserve-kernel-ab --deterministic with nta:4, 1 x 2048 x 10944: 1.29x with the
  // distance capped, docs/performance.md).
  static int64_t AheadSpan(int64_t ldb, bool through) {
    return through && ldb > kStreamProbeDepth ? kStreamProbeDepth : ldb;
  }

  // Depth per pass under GemmPath::kFixedDot, whatever M: each output element is then the
  // same sum (lane-wise over passes of this depth, reduced, passes added in order) for any
  // row count. 4096 covers a 2048-wide hidden state (V2-Lite's projections and experts) in one
  // pass: a batch-1 row (16 KiB) stays in L1 and each weight row streams through once, where
  // 512 cut it into four strided passes. Measured on lite-slice-4 (AMD EPYC,
  // docs/performance.md): batch-1 decode 42-43 -> 39-40 ms, batches 8 and 16 no slower.
  // AVX2 passes were 512 deep while a single row summed four of them side by side for its
  // independent chains; with the single row's chains from a tile of weight rows instead
  // (kFixedSingleRowTile), 4096 there too reduces a tile's sums once where it did four times:
  // on a Zen 3 EPYC host (mlaserve-kernel-ab --deterministic, two threads) 16 x 21888 x 2048
  // and 16 x 102400 x 2048 1.06x, one row unchanged (docs/performance.md).
  static constexpr int64_t kFixedDepth = 4096;
  // Whether kFixed tiles go through all their passes before the next (AVX2), so that each
  // weight row is read through at once: `MLASERVE_CPU_ISA=avx2` on the Zen 4 host, with
  // 512-deep passes, the 16-row replayed step (mlaserve-graph-bench --deterministic, two
  // threads) went 182-184 -> 155-160 ms. A single row's one chain per weight row caps it at one
  // 8-lane vector per FMA latency, so it takes kFixedSingleRowTile weight rows a tile, each its
  // own chain. (Four passes of one weight row side by side, the single row's form before, read
  // the row as four interleaved streams 1 KiB apart: on a Zen 3 EPYC host, mlaserve-kernel-ab
  // --deterministic, two threads, 1 x 21888 x 2048 11.4 GB/s against 18.6-19.6 with tiles of
  // 2, 3 or 4 rows, docs/performance.md.)
  static constexpr bool kFixedTilePasses = kW == 8;
  static constexpr int kFixedSingleRowTile = 3;

  // Depth per pass for a single row outside kFixed: one pass over any hidden size or MLP width
  // of the DeepSeek family, so each weight row is one sequential stream; the row of A (up to
  // 128 KiB) is read from L2 at one vector per weight vector, which keeps up. In passes of
  // 8,192 a 10,944-deep row was a strided stream: on the Zen 4 host (AVX-512, one thread,
  // 1 x 2048 x 10944) 18.9-19.6 -> 22.2-22.4 GB/s with t1:1, 8.6-10.3 -> 11.0-12.5 with none.
  static constexpr int64_t kSingleRowDepth = 32768;

  // More rows than this go through the weights in chunks of this many (RunChunked): each
  // weight vector, once widened, feeds kChunkRows x TileRows FMAs. On the AMD EPYC host (Zen 4,
  // AVX-512; its two cores' FMA peak is 229 GFLOP/s), `MLASERVE_BENCH_DETERMINISTIC=1
  // mlaserve-kernel-bench --benchmark_filter=BM_Gemm/16/`: chunks of 4 rows x 6 weight rows
  // 165-167 GFLOP/s (21888 x 2048) and 150-151 (2048 x 10944) against 154 and 124-127 for the
  // earlier 8 x 3 (and, with A copied once per call, 189-192 and 189-190 where the prefetch
  // into L2 is chosen); 2-row chunks re-read the weights from L2 too often. With AVX2's 16
  // registers a 4-row chunk gets 3 weight rows where 8 rows got one.
  static constexpr int kChunkRows = 4;

  // Weight rows per tile for M rows of A: one for a single row, so each thread reads one
  // sequential stream (bandwidth-bound: on the AMD EPYC Zen 4 host, `mlaserve generate` decoded
  // lite-slice-4 at 45.2-46.7 tok/s against 38.5-39.6 with 4 interleaved rows, when the host was
  // in its fast state; both read 29 in its slow one); otherwise as many as the vector registers
  // hold with their m x r accumulators, r weight vectors and a row of A (a tile that spills
  // reads and writes accumulators through the stack on every step: with AVX2's 16 registers,
  // 2 x 6 and 3 x 4 did), at most 6.
  static constexpr int TileRows(int m) {
    const int r = (V::kRegisters - 1) / (m + 1);
    const int cap = m == 1 ? 1 : 6;
    return r < 1 ? 1 : (r > cap ? cap : r);
  }

  // Accumulator chains per output element (GemvTile) for M rows of A; only a single row, whose
  // tile is one weight row, has registers to spare for more than one. With one chain a single
  // row's FMAs wait on each other, which caps it at one vector of weights per FMA latency: with
  // AVX2's 8 lanes about 14 GB/s of bf16 weights per core at 3.6 GHz, under what one core
  // streams on current hosts (`MLASERVE_CPU_ISA=avx2`, one thread, on the Zen 4 host: 14-17
  // GB/s with one chain, 21-29 with four). Under kFixed (--deterministic, the default) every
  // row count must sum in the same order, so the chains stay one and a single row takes its
  // independent ones from a tile of weight rows instead (kFixedSingleRowTile); two chains for
  // every row count measured 0.65-0.7x at 4 and 16 rows. AVX-512 keeps one everywhere (two or
  // four measured no faster on that host, some shapes slower).
  static constexpr int Chains(int m, bool fixed) {
    return kW < 16 && !fixed && m == 1 ? 4 : 1;
  }

  // Rows of A already copied (and rounded, for bf16 inputs) for every chunk of one call:
  // row i of the chunk at rows + i * pitch, its full depth.
  struct PreparedA {
    const float* rows = nullptr;
    int64_t pitch = 0;
  };

  // Copies columns [k0, k0 + kb) of rows [i0, i0 + m) of A, rounded as the kernels read them
  // (bf16 inputs), to dst at `pitch` (the packed GEMM's A blocks too).
  static void CopyA(const GemmArgs& g, int64_t i0, int64_t m, int64_t k0, int64_t kb, float* dst,
                    int64_t pitch) {
    for (int64_t i = 0; i < m; ++i) {
      const float* src = ARow(g, i0 + i) + k0;
      float* row = dst + i * pitch;
      if (g.a_bf16) {
        for (int64_t l = 0; l < kb; ++l) row[l] = RoundToBf16(src[l]);
      } else {
        for (int64_t l = 0; l < kb; ++l) row[l] = src[l];
      }
    }
  }

  // CopyA for the dot products against TB weights: with kPairs<TB>, each block of kPairBlock
  // elements (from column k0 on, k0 a multiple of it) as its even elements, then its odd ones,
  // and zeros from kb to the end of the last block.
  template <class TB>
  static void CopyDotA(const GemmArgs& g, int64_t i0, int64_t m, int64_t k0, int64_t kb,
                       float* dst, int64_t pitch) {
    if constexpr (!kPairs<TB>) {
      CopyA(g, i0, m, k0, kb, dst, pitch);
    } else {
      const int64_t whole = kb / kPairBlock * kPairBlock;
      // One pass per row, rounding (bf16 inputs) as it copies.
      auto split = [&](auto round) {
        for (int64_t i = 0; i < m; ++i) {
          const float* src = ARow(g, i0 + i) + k0;
          float* row = dst + i * pitch;
          for (int64_t l = 0; l < whole; l += kPairBlock) {
            for (int w = 0; w < kW; ++w) {
              row[l + w] = round(src[l + 2 * w]);
              row[l + kW + w] = round(src[l + 2 * w + 1]);
            }
          }
          if (whole < kb) {
            for (int w = 0; w < kPairBlock; ++w) {
              const int64_t from = whole + (w < kW ? 2 * w : 2 * (w - kW) + 1);
              row[whole + w] = from < kb ? round(src[from]) : 0.0f;
            }
          }
        }
      };
      if (g.a_bf16) {
        split([](float x) { return RoundToBf16(x); });
      } else {
        split([](float x) { return x; });
      }
    }
  }

  // TileRows for TB weights: under kPairs<TB> each weight row's two halves are live beside the
  // m x r accumulators and the two halves of a row of A, and six registers are left spare: a
  // 4-row tile then takes 4 weight rows. On the Zen 4 host (BM_Gemm/16/*, deterministic, three
  // alternating rounds) 4 read 188-198 and 185-190 GFLOP/s, 5 (all 32 registers) 185-194 and
  // 178-184, 6 (spilling) 176-185 and 167-181.
  template <class TB>
  static constexpr int DotTileRows(int m) {
    if constexpr (!kPairs<TB>) {
      return TileRows(m);
    } else {
      const int r = (V::kRegisters - 8) / (m + 2);
      const int cap = m == 1 ? 1 : 6;
      return r < 1 ? 1 : (r > cap ? cap : r);
    }
  }

  template <class TB, int M, bool kFixed>
  static void Gemv(const GemmArgs& g, float* scratch, PreparedA prepared) {
    constexpr int kChains = Chains(M, kFixed);
    constexpr bool kTilePasses = kFixed && kFixedTilePasses;
    constexpr int kRows = kTilePasses && M == 1 ? kFixedSingleRowTile : DotTileRows<TB>(M);
    // Depth per pass: the M rows of A (32 KiB) stay in L1 while every weight row of the
    // thread streams past them once per pass; A read from L2 instead would limit the stream.
    // They are copied at a pitch of kDepth plus one cache line: rows of A (and B) a multiple
    // of 4 KiB apart would all compete for the same L1 sets.
    constexpr int64_t kDepth =
        kFixed ? kFixedDepth : (M == 1 ? kSingleRowDepth : (32 * 1024 / (4 * M)) / 64 * 64);
    constexpr int64_t kPitch = kDepth + 16;
    static_assert(M * kPitch <= kGemmScratchFloats);
    const float* a[M];
    float* c[M];
    for (int i = 0; i < M; ++i) c[i] = CRow(g, i);
    const TB* b = static_cast<const TB*>(g.b);
    // Under kFixedTilePasses a tile goes through all its passes before the next tile, so that
    // each weight row is read through at once (pass by pass over every row, the rows were read
    // a pass at a time: 4 rows 0.45x with 512-deep passes), where A's every pass is at hand
    // (copied at `pitch`). The order of each output's sum is the same.
    const int64_t pitch = g.k + 16;
    const bool tile_passes =
        kTilePasses && (prepared.rows != nullptr || M * pitch <= kGemmScratchFloats);
    // Whether each weight row is read through at once (a tile through its passes, or a single
    // pass); otherwise the loop at the end streams every row a pass at a time.
    const bool through = tile_passes || g.k <= kDepth;
    const StreamTuning tuning = StreamTuningForRows(CurrentStreamTuning(), M, !through);
    const int64_t span = AheadSpan(g.ldb, through);
    if constexpr (kTilePasses) {
      if (tile_passes) {
        const float* rows = prepared.rows;
        int64_t rows_pitch = prepared.pitch;
        if (rows == nullptr) {
          CopyDotA<TB>(g, 0, M, 0, g.k, scratch, pitch);
          rows = scratch;
          rows_pitch = pitch;
        }
        auto tile_passes = [&](int64_t j, auto tile) {
          for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
            for (int i = 0; i < M; ++i) a[i] = rows + i * rows_pitch + k0;
            tile(j, k0, Lo(kDepth, g.k - k0), g.accumulate || k0 > 0);
          }
        };
        int64_t j = g.n_begin;
        for (; j + kRows <= g.n_end; j += kRows) {
          tile_passes(j, [&](int64_t jj, int64_t k0, int64_t kb, bool acc) {
            GemvTile<TB, M, kRows, kChains>(a, b + k0, g.ldb, kb, c, jj, acc, tuning, span);
          });
        }
        for (; j < g.n_end; ++j) {
          tile_passes(j, [&](int64_t jj, int64_t k0, int64_t kb, bool acc) {
            GemvTile<TB, M, 1, kChains>(a, b + k0, g.ldb, kb, c, jj, acc, tuning, span);
          });
        }
        return;
      }
    }
    for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
      const int64_t kb = Lo(kDepth, g.k - k0);
      const bool acc = g.accumulate || k0 > 0;
      if (prepared.rows != nullptr) {
        for (int i = 0; i < M; ++i) a[i] = prepared.rows + i * prepared.pitch + k0;
      } else {
        CopyDotA<TB>(g, 0, M, k0, kb, scratch, kPitch);
        for (int i = 0; i < M; ++i) a[i] = scratch + i * kPitch;
      }
      int64_t j = g.n_begin;
      for (; j + kRows <= g.n_end; j += kRows) {
        GemvTile<TB, M, kRows, kChains>(a, b + k0, g.ldb, kb, c, j, acc, tuning, span);
      }
      for (; j < g.n_end; ++j) {
        GemvTile<TB, M, 1, kChains>(a, b + k0, g.ldb, kb, c, j, acc, tuning, span);
      }
    }
  }

  template <class TB, bool kFixed, size_t... I>
  static void GemvFor(const GemmArgs& g, float* scratch, PreparedA prepared,
                      std::index_sequence<I...>) {
    using Fn = void (*)(const GemmArgs&, float*, PreparedA);
    static constexpr Fn kTable[] = {&Gemv<TB, static_cast<int>(I) + 1, kFixed>...};
    kTable[g.m - 1](g, scratch, prepared);
  }

  // Any m: chunks of at most kChunkRows rows. Columns go in blocks (a multiple of the tile's
  // weight rows) that stay in L2 while every chunk of rows passes, so B is still read from
  // memory once; A is copied once for all blocks where the scratch holds it (else once per
  // block and chunk: at k = 10944 that copy cost a sixth of the GEMM). Each output element's
  // sum does not depend on the chunking, and under kFixed not on m either.
  template <class TB, bool kFixed>
  static void RunChunked(const GemmArgs& g, float* scratch) {
    const auto rows = std::make_index_sequence<kChunkRows>();
    if (g.m <= kChunkRows) {
      GemvFor<TB, kFixed>(g, scratch, PreparedA{}, rows);
      return;
    }
    constexpr int64_t kL2Bytes = 512 * 1024;
    constexpr int64_t kTile = DotTileRows<TB>(kChunkRows);
    const int64_t row_bytes = g.k * static_cast<int64_t>(sizeof(TB));
    const int64_t block =
        row_bytes * kTile >= kL2Bytes ? kTile : kL2Bytes / row_bytes / kTile * kTile;
    const int64_t pitch = (g.k + kPairBlock - 1) / kPairBlock * kPairBlock + 16;
    PreparedA prepared;
    if (g.m * pitch <= kGemmScratchFloats) {
      CopyDotA<TB>(g, 0, g.m, 0, g.k, scratch, pitch);
      prepared = {scratch, pitch};
    }
    for (int64_t jb = g.n_begin; jb < g.n_end; jb += block) {
      for (int64_t i0 = 0; i0 < g.m; i0 += kChunkRows) {
        GemmArgs sub = Rows(g, i0, Lo(kChunkRows, g.m - i0));
        sub.n_begin = jb;
        sub.n_end = Lo(jb + block, g.n_end);
        PreparedA chunk = prepared;
        if (chunk.rows != nullptr) chunk.rows += i0 * pitch;
        GemvFor<TB, kFixed>(sub, scratch, chunk, rows);
      }
    }
  }

  // C rows i < m (m <= kMaxM), columns [n_begin, n_end). scratch: kGemmScratchFloats.
  template <class TB>
  static void Run(const GemmArgs& g, float* scratch) {
    RunChunked<TB, false>(g, scratch);
  }

  // Any m, with one reduction order per output element whatever m (GemmPath::kFixedDot):
  // dot products at kFixedDepth.
  template <class TB>
  static void RunFixed(const GemmArgs& g, float* scratch) {
    RunChunked<TB, true>(g, scratch);
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

#endif  // MLASERVE_KERNELS_CPU_CPU_GEMV_IMPL_H_
