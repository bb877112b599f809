// The Gumbel screen of a sampled draw (CpuKernels::gumbel_screen): the rule, token by token,
// and the loop of the SIMD builds over lanes of it (ScreenTokens: instantiate only from the
// ISA files, with their traits).
//
// A kept token's score is a + g, a = (value - max) / temperature and g = -log(-log u) its
// Gumbel noise, u = sampling::StreamUniform(stream, id). Since -log u >= 1 - u, g <= -log(1 - u),
// so the token stays below `best` when 1 - u > exp(a - best). With t = a - best + 1e-6 (the
// margin covers every rounding) and 2^k <= 1 - u (k the binary exponent of 1 - u),
// k > t / ln 2 + 1 is enough: no logarithm is taken, and a draw skips the noise of most
// tokens. Below t = -38 no uniform under 1 can lift a token (-log(1 - u) <= 53 ln 2 < 36.8).
#ifndef MLASERVE_KERNELS_CPU_CPU_GUMBEL_SCREEN_H_
#define MLASERVE_KERNELS_CPU_CPU_GUMBEL_SCREEN_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_exp_double.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sampling_math.h"

namespace mlaserve::cpu_impl {

// Constants of the rule, shared by its scalar and vector forms.
inline constexpr double kScreenMargin = 1e-6;
inline constexpr double kScreenFloor = -38.0;
inline constexpr double kScreenSlack = 1.0 + 1e-9;

// Whether the screen keeps token `id` of value `value`.
inline bool ScreenKeeps(const GumbelScreen& s, float value, int32_t id) {
  const double t =
      (static_cast<double>(value) - s.max) * s.inv_temperature - s.best + kScreenMargin;
  if (!(t < 0)) return true;  // NaN included
  if (t < kScreenFloor) return false;
  const double rest = 1.0 - sampling::StreamUniform(s.stream, static_cast<uint32_t>(id));
  uint64_t bits;
  std::memcpy(&bits, &rest, sizeof bits);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  return !(exponent > t * kLog2E + kScreenSlack);
}

inline int32_t ScreenTokensScalar(const GumbelScreen& s, const int32_t* ids, int32_t begin,
                                  int32_t end, int32_t* out) {
  int32_t m = 0;
  for (int32_t i = begin; i < end; ++i) {
    const int32_t id = ids != nullptr ? ids[i] : i;
    if (ScreenKeeps(s, s.values[id], id)) out[m++] = id;
  }
  return m;
}

// The rule on V::kScreenLanes tokens at once, in the rule's own operations lane by lane:
// bit i of the result is ScreenKeeps for lane i. V provides, beyond its double lanes D
// (cpu_vector_impl.h): WidenD (a lane group of floats as doubles), AddD, MulD, NotLessD and
// NotGreaterD (bit masks of !(a < b) and !(a > b)), and 64-bit integer lanes I64 with
// IdsTimes (the lane group's ids times a constant), Set64, Xor64, Add64, ShiftRight64<k>,
// MulLo64 (the low 64 bits of a product by a constant), U53ToDouble (exact below 2^53), BitsOfD
// and HighBitsToDouble (x >> 52 as a double).
template <class V, class Values, class Ids>
uint32_t ScreenMask(const GumbelScreen& s, Values values, Ids ids) {
  using sampling::kSplitMixGamma;
  auto t = V::MulD(V::SubD(V::WidenD(values), V::Set1D(s.max)), V::Set1D(s.inv_temperature));
  t = V::AddD(V::SubD(t, V::Set1D(s.best)), V::Set1D(kScreenMargin));
  const uint32_t near = V::NotLessD(t, V::Set1D(0.0));
  const uint32_t above_floor = V::NotLessD(t, V::Set1D(kScreenFloor));
  // sampling::StreamUniform(stream, id) = SplitMix64(stream ^ id * gamma) as a uniform.
  auto x = V::IdsTimes(ids, kSplitMixGamma);
  x = V::Add64(V::Xor64(x, V::Set64(s.stream)), V::Set64(kSplitMixGamma));
  x = V::MulLo64(V::Xor64(x, V::template ShiftRight64<30>(x)), sampling::kSplitMixMul1);
  x = V::MulLo64(V::Xor64(x, V::template ShiftRight64<27>(x)), sampling::kSplitMixMul2);
  x = V::Xor64(x, V::template ShiftRight64<31>(x));
  const auto u = V::MulD(V::AddD(V::U53ToDouble(V::template ShiftRight64<11>(x)), V::Set1D(0.5)),
                         V::Set1D(sampling::kUniformScale));
  // 1 - u >= 0: its bits shifted right by 52 are its biased exponent.
  const auto rest = V::BitsOfD(V::SubD(V::Set1D(1.0), u));
  const auto exponent = V::SubD(V::HighBitsToDouble(rest), V::Set1D(1023.0));
  const auto bound = V::AddD(V::MulD(t, V::Set1D(kLog2E)), V::Set1D(kScreenSlack));
  return near | (above_floor & V::NotGreaterD(exponent, bound));
}

// The SIMD loop over V's screen lanes: V::kScreenLanes tokens at a time, their ids loaded
// (V::LoadIds) or counted (V::IotaIds), their values loaded or gathered through the ids
// (V::GatherValues(values, ids)), and ScreenMask's bits of the kept lanes walked; the tail
// token by token.
template <class V>
int32_t ScreenTokens(const GumbelScreen& s, const int32_t* ids, int32_t begin, int32_t end,
                     int32_t* out) {
  constexpr int32_t kLanes = V::kScreenLanes;
  int32_t m = 0;
  int32_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    uint32_t mask;
    if (ids != nullptr) {
      mask = ScreenMask<V>(s, V::GatherValues(s.values, ids + i), V::LoadIds(ids + i));
    } else {
      mask = ScreenMask<V>(s, V::LoadValues(s.values + i), V::IotaIds(i));
    }
    while (mask != 0) {
      const int lane = __builtin_ctz(mask);
      out[m++] = ids != nullptr ? ids[i + lane] : i + lane;
      mask &= mask - 1;
    }
  }
  return m + ScreenTokensScalar(s, ids, i, end, out + m);
}

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_GUMBEL_SCREEN_H_
