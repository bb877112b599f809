// The AVX-512 SIMD traits of the CPU kernels (see cpu_gemm_impl.h for what a traits type
// provides): Avx512 uses no BF16 instruction, so it runs on every AVX-512 processor;
// Avx512Bf16 adds the bf16 dot product. Include only from the files compiled with the AVX-512
// flags (*_avx512.cc, *_amx.cc; see kernels/CMakeLists.txt): the types live in an anonymous
// namespace, so each of those files gets its own copy and no ISA's code leaks into another.
#ifndef MLASERVE_KERNELS_CPU_CPU_AVX512_TRAITS_H_
#define MLASERVE_KERNELS_CPU_CPU_AVX512_TRAITS_H_

// GCC 12 reports the deliberately undefined pass-through operand inside the AVX-512 intrinsics
// (_mm512_undefined_ps) as uninitialized; the warning points into the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "kernels/cpu/cpu_gumbel_screen.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kW = 16;
  // 12 x 32 micro-tiles: 24 accumulators, 2 B vectors and a broadcast of the 32 registers
  // (measured a little faster than 14 x 32 and than 8 x 48 or 6 x 64 with a shallower depth).
  static constexpr int kGemmMr = 12;
  static constexpr int kGemmNv = 2;
  static constexpr int kRegisters = 32;

  static __mmask16 Mask(int64_t n) {
    return n >= kW ? static_cast<__mmask16>(0xffff)
                   : static_cast<__mmask16>(n <= 0 ? 0u : (1u << n) - 1u);
  }
  static F FromBf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }

  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float x) { return _mm512_set1_ps(x); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static F Load(const uint16_t* p) {
    return FromBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F LoadN(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static F LoadN(const uint16_t* p, int64_t n) {
    return FromBf16(_mm256_maskz_loadu_epi16(Mask(n), p));
  }
  static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static void StoreN(float* p, F x, int64_t n) { _mm512_mask_storeu_ps(p, Mask(n), x); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Max(F a, F b) { return _mm512_max_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // The sum of the lanes as a tree of halves: lane l + lane l + 8, then + 4, + 2, + 1 (the
  // order of GCC's _mm512_reduce_add_ps, spelled out so that no compiler reassociates it).
  static float ReduceAdd(F x) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_permute_ps(q, 0x4e));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
  }
  // Lane i: ReduceAdd(y[i]), bit for bit (every sum in the same order), for 16 vectors at
  // once: each level of the tree adds the halves of two vectors in one instruction.
  static F ReduceAddLanes(const F (&y)[kW]) {
    auto halves = [](F a, F b) {  // lanes l + l + 8 of a, then of b
      return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    };
    auto quarters = [](F a, F b) {  // per 256-bit half, lanes l + l + 4
      return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
    };
    auto pairs = [](F a, F b) {  // per 128-bit lane, l + l + 2
      return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xee));
    };
    auto ones = [](F a, F b) {  // per 128-bit lane, l + l + 1
      return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
    };
    // The tree leaves input 4t + q's sum in lane 4q + t, so the inputs go in transposed.
    F t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const int p = 2 * i, n = p + 1;
      t[i] = halves(y[(p % 4) * 4 + p / 4], y[(n % 4) * 4 + n / 4]);
    }
    const F v0 = quarters(t[0], t[1]), v1 = quarters(t[2], t[3]);
    const F v2 = quarters(t[4], t[5]), v3 = quarters(t[6], t[7]);
    return ones(pairs(v0, v1), pairs(v2, v3));
  }
  static float Lane0(F x) { return _mm512_cvtss_f32(x); }

  // exp(x) = 2^n · exp(r), |r| <= ln2/2, exp(r) by its degree-7 Taylor polynomial (error below
  // one f32 ulp). vscalefps applies 2^n with correct underflow, so inputs far below the f32
  // range give 0; the constants go first in max/min so that a NaN input propagates.
  static F Exp(F x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(88.72283f), x);
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    F p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }

  // Double lanes, for sampling probabilities (cpu_vector_impl.h): kDw of them, the first n
  // floats of p widened (the rest 0), stored back n at a time.
  using D = __m512d;
  static constexpr int kDw = 8;
  static D WidenN(const float* p, int64_t n) {
    return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(static_cast<__mmask8>(Mask(n)), p));
  }
  static void StoreDN(double* p, D x, int64_t n) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(Mask(n)), x);
  }
  static D SubD(D a, D b) { return _mm512_sub_pd(a, b); }
  static D DivD(D a, D b) { return _mm512_div_pd(a, b); }
  static D Set1D(double x) { return _mm512_set1_pd(x); }
  // What cpu_impl::ExpD needs: vscalefpd applies 2^n, rounding a result below the normal range
  // as a subnormal should.
  static D MaxD(D a, D b) { return _mm512_max_pd(a, b); }
  static D MinD(D a, D b) { return _mm512_min_pd(a, b); }
  static D RoundD(D x) {
    return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static D FmaD(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static D FnmaddD(D a, D b, D c) { return _mm512_fnmadd_pd(a, b, c); }
  static D ScaleByPow2(D p, D n) { return _mm512_scalef_pd(p, n); }

  // Gumbel screen lanes (cpu_gumbel_screen.h): eight tokens, the rule in double lanes and the
  // noise's SplitMix64 in 64-bit ones (vpmullq, vcvtuqq2pd).
  static constexpr int kScreenLanes = 8;
  static __m256i LoadIds(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static __m256i IotaIds(int32_t first) {
    return _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static __m256 LoadValues(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 GatherValues(const float* v, const int32_t* ids) {
    return _mm256_i32gather_ps(v, LoadIds(ids), 4);
  }
  static D WidenD(__m256 x) { return _mm512_cvtps_pd(x); }
  static D AddD(D a, D b) { return _mm512_add_pd(a, b); }
  static D MulD(D a, D b) { return _mm512_mul_pd(a, b); }
  // Bit i: !(a[i] < b[i]) (so NaN sets it), and !(a[i] > b[i]).
  static uint32_t NotLessD(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_NLT_UQ); }
  static uint32_t NotGreaterD(D a, D b) { return _mm512_cmp_pd_mask(a, b, _CMP_NGT_UQ); }
  // 64-bit integer lanes.
  using I64 = __m512i;
  static I64 IdsTimes(__m256i ids, uint64_t c) {
    return _mm512_mullo_epi64(_mm512_cvtepu32_epi64(ids), Set64(c));
  }
  static I64 Set64(uint64_t c) { return _mm512_set1_epi64(static_cast<long long>(c)); }
  static I64 Xor64(I64 a, I64 b) { return _mm512_xor_si512(a, b); }
  static I64 Add64(I64 a, I64 b) { return _mm512_add_epi64(a, b); }
  template <int kShift>
  static I64 ShiftRight64(I64 a) {
    return _mm512_srli_epi64(a, kShift);
  }
  static I64 MulLo64(I64 a, uint64_t c) { return _mm512_mullo_epi64(a, Set64(c)); }
  static D U53ToDouble(I64 x) { return _mm512_cvtepu64_pd(x); }  // x < 2^53: exact
  static I64 BitsOfD(D x) { return _mm512_castpd_si512(x); }
  static D HighBitsToDouble(I64 x) { return _mm512_cvtepu64_pd(_mm512_srli_epi64(x, 52)); }

  static void LoadBf16Pairs(const uint32_t* p, F& even, F& odd) {
    const __m512i w = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }

  // Word c of row r (rows src_ld_bytes apart) goes to dst[c * dst_ld + r], r, c < 16: a 16 x 16
  // transpose in four shuffle stages (pairs, quads within 128-bit lanes, then 128-bit lanes
  // twice).
  static void Transpose32(const void* src, int64_t src_ld_bytes, void* dst, int64_t dst_ld) {
    F r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = _mm512_loadu_ps(static_cast<const char*>(src) + i * src_ld_bytes);
    }
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
      u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
      u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
      u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
      u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    // u[4 * q + c] holds, in 128-bit lane L, rows 4q..4q+3 of column 4L + c.
    float* out = static_cast<float*>(dst);
    for (int c = 0; c < 4; ++c) {
      const F va = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
      const F wa = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
      const F vb = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
      const F wb = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
      Store(out + (c + 0) * dst_ld, _mm512_shuffle_f32x4(va, vb, 0x88));
      Store(out + (c + 8) * dst_ld, _mm512_shuffle_f32x4(va, vb, 0xDD));
      Store(out + (c + 4) * dst_ld, _mm512_shuffle_f32x4(wa, wb, 0x88));
      Store(out + (c + 12) * dst_ld, _mm512_shuffle_f32x4(wa, wb, 0xDD));
    }
  }
};

// The same build plus VDPBF16PS (AVX512_BF16), which the packed GEMM uses for bf16 activations
// against bf16 weights: one instruction adds two exact products per lane, where the f32 path
// widens both operands and issues two FMAs. Used only where DetectCpuIsa found AVX512_BF16.
struct Avx512Bf16 : Avx512 {
  using Words = __m512i;  // kW 32-bit words, each two bf16 of consecutive k
  static Words LoadWords(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static Words Set1Word(uint32_t w) { return _mm512_set1_epi32(static_cast<int>(w)); }
  static void StoreWords(uint32_t* p, Words w) { _mm512_storeu_si512(p, w); }
  // 2 * kW bf16 from p as words; LoadBf16N zero-fills the elements from n on.
  static Words LoadBf16(const uint16_t* p) { return _mm512_loadu_si512(p); }
  static Words LoadBf16N(const uint16_t* p, int64_t n) {
    const __mmask32 mask = n >= 32 ? ~__mmask32{0} : (n <= 0 ? 0 : (__mmask32{1} << n) - 1);
    return _mm512_maskz_loadu_epi16(mask, p);
  }
  // lo and hi rounded to bf16 (nearest even), lo's lanes first: the words of 2 * kW
  // consecutive elements.
  static Words RoundPair(F lo, F hi) {
    return reinterpret_cast<Words>(_mm512_cvtne2ps_pbh(hi, lo));
  }
  // acc[i] + a.lo[i] * b.lo[i] + a.hi[i] * b.hi[i], lane by lane, in f32.
  static F DotBf16(F acc, Words a, Words b) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  }
};

}  // namespace
}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_AVX512_TRAITS_H_
