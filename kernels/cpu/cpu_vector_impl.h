// The elementwise primitives of CpuKernels over a SIMD traits type V, and the assembly of the
// whole table. Same rules as cpu_gemm_impl.h: include only from the ISA files.
//
// Beyond what cpu_gemm_impl.h needs, V provides Sub, Mul, Div, Max, Exp (NaN in, NaN out; 0 for
// very negative inputs) and Lane0 (the first lane as a float); and in double lanes D (kDw of
// them): WidenN (the first n floats as doubles), StoreDN, SubD, DivD, Set1D, and either ExpD
// itself (the portable build: std::exp) or what cpu_impl::ExpD needs (cpu_exp_double.h).
// Optionally the Gumbel screen's lanes (kScreenLanes and the primitives of
// cpu_gumbel_screen.h's ScreenTokens and ScreenMask); without them it runs token by token.
#ifndef MLASERVE_KERNELS_CPU_CPU_VECTOR_IMPL_H_
#define MLASERVE_KERNELS_CPU_CPU_VECTOR_IMPL_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_exp_double.h"
#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_gumbel_screen.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve::cpu_impl {

template <class V>
struct VectorImpl {
  using F = typename V::F;
  static constexpr int kW = V::kW;

  static float Max(const float* x, int64_t n) {
    int64_t i = 0;
    float m = x[0];
    if (n >= kW) {
      F acc = V::Load(x);
      for (i = kW; i + kW <= n; i += kW) acc = V::Max(acc, V::Load(x + i));
      alignas(64) float lanes[kW];
      V::Store(lanes, acc);
      for (int l = 0; l < kW; ++l) m = lanes[l] > m ? lanes[l] : m;
    }
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }

  static float ExpSum(float* x, int64_t n, float shift) {
    const F s = V::Set1(shift);
    F sum = V::Zero();
    int64_t i = 0;
    for (; i + kW <= n; i += kW) {
      const F e = V::Exp(V::Sub(V::Load(x + i), s));
      V::Store(x + i, e);
      sum = V::Add(sum, e);
    }
    float total = V::ReduceAdd(sum);
    for (; i < n; ++i) {
      x[i] = V::Lane0(V::Exp(V::Set1(x[i] - shift)));
      total += x[i];
    }
    return total;
  }

  // Σ exp(x[i] - shift): each term in f32, summed lane-wise in f32 over blocks of 256
  // elements, the blocks in double.
  static double SumExp(const float* x, int64_t n, float shift) {
    constexpr int64_t kBlock = 256;  // elements per f32 partial sum
    const F s = V::Set1(shift);
    double total = 0.0;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t end = b + kBlock < n ? b + kBlock : n;
      F sum = V::Zero();
      int64_t i = b;
      for (; i + kW <= end; i += kW) sum = V::Add(sum, V::Exp(V::Sub(V::Load(x + i), s)));
      if (i < end) {
        // Only the lanes before the end: those past it hold exp(0 - shift).
        const F e = V::Exp(V::Sub(V::LoadN(x + i, end - i), s));
        alignas(64) float lanes[kW];
        V::Store(lanes, e);
        for (int64_t l = 0; l < end - i; ++l) total += lanes[l];
      }
      total += V::ReduceAdd(sum);
    }
    return total;
  }

  // The block's maximum from memory, prefetching the block after it (non-temporal), then its
  // terms from L1 against the running maximum.
  static RowStats RowStatsOf(const float* x, int64_t n) {
    constexpr int64_t kLine = 64 / sizeof(float);
    RowStats stats{.max = x[0], .first_block = 0, .sum_exp = 0.0};
    for (int64_t b = 0; b < n; b += kRowStatsBlock) {
      const int64_t end = b + kRowStatsBlock < n ? b + kRowStatsBlock : n;
      for (int64_t l = end; l < end + kRowStatsBlock && l < n; l += kLine) {
        __builtin_prefetch(x + l, 0, 0);
      }
      const float block_max = Max(x + b, end - b);
      if (block_max > stats.max) {
        // exp(old - new) in double; 0 while nothing but -inf has been read.
        stats.sum_exp *= std::exp(static_cast<double>(stats.max) - block_max);
        stats.max = block_max;
        stats.first_block = b;
      }
      // A block of -inf under a maximum of -inf adds nothing (its terms would be NaN).
      if (block_max != -std::numeric_limits<float>::infinity()) {
        stats.sum_exp += SumExp(x + b, end - b, stats.max);
      }
    }
    return stats;
  }

  static void RelativeProbabilities(const float* x, int64_t n, float max, float temperature,
                                    double* p) {
    constexpr int kDw = V::kDw;
    const auto shift = V::Set1D(max), divisor = V::Set1D(temperature);
    for (int64_t i = 0; i < n; i += kDw) {
      const int64_t c = n - i;
      const auto quotient = V::DivD(V::SubD(V::WidenN(x + i, c), shift), divisor);
      if constexpr (requires { V::ExpD(quotient); }) {
        V::StoreDN(p + i, V::ExpD(quotient), c);
      } else {
        V::StoreDN(p + i, ExpD<V>(quotient), c);
      }
    }
  }

  static int32_t GumbelScreenOf(const GumbelScreen& s, const int32_t* ids, int32_t begin,
                                int32_t end, int32_t* out) {
    if constexpr (requires { V::kScreenLanes; }) {
      return ScreenTokens<V>(s, ids, begin, end, out);
    } else {
      return ScreenTokensScalar(s, ids, begin, end, out);
    }
  }

  static void Scale(float* x, int64_t n, float s) {
    const F sv = V::Set1(s);
    for (int64_t i = 0; i < n; i += kW) {
      const int64_t c = n - i;
      V::StoreN(x + i, V::Mul(V::LoadN(x + i, c), sv), c);
    }
  }

  static void Axpy(float* y, const float* x, int64_t n, float a) {
    const F av = V::Set1(a);
    int64_t i = 0;
    for (; i + kW <= n; i += kW) V::Store(y + i, V::Fma(av, V::Load(x + i), V::Load(y + i)));
    if (i < n) {
      const int64_t c = n - i;
      V::StoreN(y + i, V::Fma(av, V::LoadN(x + i, c), V::LoadN(y + i, c)), c);
    }
  }

  static F Silu(F g) {
    const F one = V::Set1(1.0f);
    return V::Div(g, V::Add(one, V::Exp(V::Sub(V::Zero(), g))));
  }

  static void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + kW <= n; i += kW) V::Store(out + i, V::Mul(Silu(V::Load(gate + i)), V::Load(up + i)));
    if (i < n) {
      const int64_t c = n - i;
      V::StoreN(out + i, V::Mul(Silu(V::LoadN(gate + i, c)), V::LoadN(up + i, c)), c);
    }
  }

  static float SumSquares(const float* x, int64_t n) {
    F acc = V::Zero();
    for (int64_t i = 0; i < n; i += kW) {
      const F v = V::LoadN(x + i, n - i);
      acc = V::Fma(v, v, acc);
    }
    return V::ReduceAdd(acc);
  }

  template <class TW>
  static void ScaleMulTyped(const float* x, float s, const TW* w, float* out, int64_t n) {
    const F sv = V::Set1(s);
    for (int64_t i = 0; i < n; i += kW) {
      const int64_t c = n - i;
      V::StoreN(out + i, V::Mul(V::Mul(V::LoadN(x + i, c), sv), V::LoadN(w + i, c)), c);
    }
  }

  static void ScaleMul(const float* x, float s, const void* w, DType w_dtype, float* out,
                       int64_t n) {
    if (w_dtype == DType::kBF16) {
      ScaleMulTyped(x, s, static_cast<const uint16_t*>(w), out, n);
    } else {
      ScaleMulTyped(x, s, static_cast<const float*>(w), out, n);
    }
  }
};

template <class V>
CpuKernels MakeCpuKernels(CpuIsa isa) {
  using G = GemmImpl<V>;
  using E = VectorImpl<V>;
  CpuKernels k;
  k.isa = isa;
  k.gemm_panel_cols = G::kNr;
  // Where the dot products read bf16 weights as pairs (AVX-512). On the Zen 4 host
  // (BM_MoeExperts/512, alternating rounds): f32 rows 198-205 GFLOP/s against 156-174 packed,
  // bf16 rows on VDPBF16PS 291-329 against 260-281; with AVX2 (no pairs) 156-175 against
  // 163-165, so AVX2 keeps the packed path.
  k.expert_rows_by_dot = GemvImpl<V>::template kPairs<uint16_t>;
  k.fixed_tiles = false;
  k.gemm = &G::Run;
  k.gemm_nn = &GemvImpl<V>::RunNn;
  k.max = &E::Max;
  k.exp_sum = &E::ExpSum;
  k.row_stats = &E::RowStatsOf;
  k.relative_probabilities = &E::RelativeProbabilities;
  k.gumbel_screen = &E::GumbelScreenOf;
  k.scale = &E::Scale;
  k.axpy = &E::Axpy;
  k.silu_mul = &E::SiluMul;
  k.sum_squares = &E::SumSquares;
  k.scale_mul = &E::ScaleMul;
  return k;
}

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_VECTOR_IMPL_H_
