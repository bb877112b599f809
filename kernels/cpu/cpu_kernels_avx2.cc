// The AVX2 + FMA build of CpuKernels (compiled with -mavx2 -mfma; see kernels/CMakeLists.txt).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_gumbel_screen.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_vector_impl.h"

namespace mlaserve {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int kW = 8;
  // 6 x 16 micro-tiles: 12 accumulators, 2 B vectors and a broadcast of the 16 registers.
  static constexpr int kGemmMr = 6;
  static constexpr int kGemmNv = 2;
  static constexpr int kRegisters = 16;

  static __m256i Mask(int64_t n) {
    const int32_t c = static_cast<int32_t>(n < 0 ? 0 : (n > kW ? kW : n));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F FromBf16(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }

  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float x) { return _mm256_set1_ps(x); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static F Load(const uint16_t* p) {
    return FromBf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F LoadN(const float* p, int64_t n) { return _mm256_maskload_ps(p, Mask(n)); }
  static F LoadN(const uint16_t* p, int64_t n) {
    // AVX2 has no 16-bit masked load; a partial copy never touches memory past p[n - 1].
    alignas(16) uint16_t tmp[kW] = {};
    const int64_t c = n < 0 ? 0 : (n > kW ? kW : n);
    __builtin_memcpy(tmp, p, static_cast<size_t>(c) * sizeof(uint16_t));
    return FromBf16(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
  }
  static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static void StoreN(float* p, F x, int64_t n) { _mm256_maskstore_ps(p, Mask(n), x); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Max(F a, F b) { return _mm256_max_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // The sum of the lanes as a tree of halves: lane l + lane l + 4, then + 2, + 1.
  static float ReduceAdd(F x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float Lane0(F x) { return _mm256_cvtss_f32(x); }

  // exp(x) = 2^n · exp(r) as in the AVX-512 build; 2^n is built in the exponent field, which
  // needs n >= -126, so inputs below -87.3 are flushed to 0 explicitly.
  static F Exp(F x) {
    const F lo = _mm256_set1_ps(-87.33654f);
    const F underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(lo, x);
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x);
    const F n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    F p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
  }

  // Double lanes, as in the AVX-512 build.
  using D = __m256d;
  static constexpr int kDw = 4;
  static __m256i MaskD(int64_t n) {
    const int64_t c = n < 0 ? 0 : (n > kDw ? kDw : n);
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(c), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static D WidenN(const float* p, int64_t n) {
    return _mm256_cvtps_pd(_mm256_castps256_ps128(LoadN(p, n < kDw ? n : kDw)));
  }
  static void StoreDN(double* p, D x, int64_t n) { _mm256_maskstore_pd(p, MaskD(n), x); }
  static D SubD(D a, D b) { return _mm256_sub_pd(a, b); }
  static D DivD(D a, D b) { return _mm256_div_pd(a, b); }
  static D Set1D(double x) { return _mm256_set1_pd(x); }
  // What cpu_impl::ExpD needs. 2^n (n integral, -1076 <= n <= 1024 after the clamps) is
  // applied as 2^(n - n/2) · 2^(n/2), two factors in the normal range built in the exponent
  // field, so that a result below the normal range is rounded once, by the second product.
  static D MaxD(D a, D b) { return _mm256_max_pd(a, b); }
  static D MinD(D a, D b) { return _mm256_min_pd(a, b); }
  static D RoundD(D x) { return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static D FmaD(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static D FnmaddD(D a, D b, D c) { return _mm256_fnmadd_pd(a, b, c); }
  static D ScaleByPow2(D p, D n) {
    const __m128i n32 = _mm256_cvtpd_epi32(n);  // NaN lanes: garbage, p is NaN there
    const __m128i half = _mm_srai_epi32(n32, 1);
    auto power = [](__m128i e) {  // 2^e, -1022 <= e <= 1023
      const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(e), _mm256_set1_epi64x(1023));
      return _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
    };
    return _mm256_mul_pd(_mm256_mul_pd(p, power(_mm_sub_epi32(n32, half))), power(half));
  }

  // Gumbel screen lanes (cpu_gumbel_screen.h): four tokens, the rule in double lanes; AVX2
  // has no 64-bit multiply nor 64-bit integer conversion, so both are built from 32-bit halves.
  static constexpr int kScreenLanes = 4;
  static __m128i LoadIds(const int32_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static __m128i IotaIds(int32_t first) {
    return _mm_add_epi32(_mm_set1_epi32(first), _mm_setr_epi32(0, 1, 2, 3));
  }
  static __m128 LoadValues(const float* p) { return _mm_loadu_ps(p); }
  // Four loads rather than VGATHERDPS: under qemu 7.2's emulation of AVX2 (the emulated
  // processors' tests) its 128-bit form returned wrong values in this loop, where native runs
  // of the same build were right.
  static __m128 GatherValues(const float* v, const int32_t* ids) {
    return _mm_setr_ps(v[ids[0]], v[ids[1]], v[ids[2]], v[ids[3]]);
  }
  static D WidenD(__m128 x) { return _mm256_cvtps_pd(x); }
  static D AddD(D a, D b) { return _mm256_add_pd(a, b); }
  static D MulD(D a, D b) { return _mm256_mul_pd(a, b); }
  static uint32_t NotLessD(D a, D b) {
    return static_cast<uint32_t>(_mm256_movemask_pd(_mm256_cmp_pd(a, b, _CMP_NLT_UQ)));
  }
  static uint32_t NotGreaterD(D a, D b) {
    return static_cast<uint32_t>(_mm256_movemask_pd(_mm256_cmp_pd(a, b, _CMP_NGT_UQ)));
  }
  using I64 = __m256i;
  // ids * c: the ids are below 2^32, so two 32-bit products make the low 64 bits.
  static I64 IdsTimes(__m128i ids, uint64_t c) {
    const I64 wide = _mm256_cvtepu32_epi64(ids);
    return _mm256_add_epi64(_mm256_mul_epu32(wide, Set64(c & 0xffffffffu)),
                            _mm256_slli_epi64(_mm256_mul_epu32(wide, Set64(c >> 32)), 32));
  }
  static I64 Set64(uint64_t c) { return _mm256_set1_epi64x(static_cast<long long>(c)); }
  static I64 Xor64(I64 a, I64 b) { return _mm256_xor_si256(a, b); }
  static I64 Add64(I64 a, I64 b) { return _mm256_add_epi64(a, b); }
  template <int kShift>
  static I64 ShiftRight64(I64 a) {
    return _mm256_srli_epi64(a, kShift);
  }
  // The low 64 bits of a * c, lane by lane.
  static I64 MulLo64(I64 a, uint64_t c) {
    const I64 c_lo = Set64(c & 0xffffffffu), c_hi = Set64(c >> 32);
    const I64 cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), c_lo),
                                       _mm256_mul_epu32(a, c_hi));
    return _mm256_add_epi64(_mm256_mul_epu32(a, c_lo), _mm256_slli_epi64(cross, 32));
  }
  // x as a double, exactly, for 0 <= x < 2^32: x placed in the significand of 2^52 and that
  // power taken off.
  static D U32ToDouble(I64 x) {
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(x, Set64(0x4330000000000000ull))),
                         _mm256_set1_pd(0x1p52));
  }
  // x as a double, exactly, for 0 <= x < 2^53: its 32-bit halves converted, the high one
  // scaled by 2^32 (exact), and added.
  static D U53ToDouble(I64 x) {
    const D hi = _mm256_mul_pd(U32ToDouble(_mm256_srli_epi64(x, 32)), _mm256_set1_pd(0x1p32));
    return _mm256_add_pd(hi, U32ToDouble(_mm256_and_si256(x, Set64(0xffffffffu))));
  }
  static I64 BitsOfD(D x) { return _mm256_castpd_si256(x); }
  static D HighBitsToDouble(I64 x) { return U32ToDouble(_mm256_srli_epi64(x, 52)); }

  static void LoadBf16Pairs(const uint32_t* p, F& even, F& odd) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    odd = _mm256_castsi256_ps(
        _mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }

  // Word c of row r (rows src_ld_bytes apart) goes to dst[c * dst_ld + r], r, c < 8.
  static void Transpose32(const void* src, int64_t src_ld_bytes, void* dst, int64_t dst_ld) {
    F r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm256_loadu_ps(
          reinterpret_cast<const float*>(static_cast<const char*>(src) + i * src_ld_bytes));
    }
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 8; g += 4) {
      u[g + 0] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
      u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
      u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
      u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    // u[4 * q + c] holds, in 128-bit lane L, rows 4q..4q+3 of column 4L + c.
    float* out = static_cast<float*>(dst);
    for (int c = 0; c < 4; ++c) {
      Store(out + c * dst_ld, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
      Store(out + (c + 4) * dst_ld, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
  }
};

}  // namespace

const CpuKernels& Avx2Kernels() {
  static const CpuKernels kernels = cpu_impl::MakeCpuKernels<Avx2>(CpuIsa::kAvx2);
  return kernels;
}

}  // namespace mlaserve
