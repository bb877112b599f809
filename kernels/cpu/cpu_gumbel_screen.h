// The Gumbel screen of a sampled draw (CpuKernels::gumbel_screen): the rule, token by token,
// and the loop of the SIMD builds over lanes of it (ScreenTokens: instantiate only from the
// ISA files, with their traits).
//
// A kept token's score is a + g, a = (value - max) / temperature and g = -log(-log u) its
// Gumbel noise, u = sampling::StreamUniform(stream, id). Since -log u >= 1 - u, g <= -log(1 - u),
// so the token stays below `best` when 1 - u > exp(a - best). With t = a - best + 1e-6 (the
// margin covers every rounding) and 2^e <= 1 - u (e the binary exponent of 1 - u),
// e > t * log2(e) + 1 is enough: no logarithm is taken, and a draw skips the noise of most
// tokens. Below t = -38 no uniform under 1 can lift a token (-log(1 - u) <= 53 ln 2 < 36.8).
#ifndef MLASERVE_KERNELS_CPU_CPU_GUMBEL_SCREEN_H_
#define MLASERVE_KERNELS_CPU_CPU_GUMBEL_SCREEN_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sampling_math.h"

namespace mlaserve::cpu_impl {

// Constants of the rule, shared by its scalar and vector forms.
inline constexpr double kScreenMargin = 1e-6;
inline constexpr double kScreenFloor = -38.0;
inline constexpr double kScreenLog2E = 1.4426950408889634;
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
  return !(exponent > t * kScreenLog2E + kScreenSlack);
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

// The SIMD loop over V's screen lanes: V::kScreenLanes tokens at a time, their ids loaded
// (V::LoadIds) or counted (V::IotaIds), their values loaded or gathered through the ids
// (V::GatherValues(values, ids)), and V::ScreenMask's bits of the kept lanes (the scalar rule,
// lane by lane, in the same operations) walked; the tail token by token.
template <class V>
int32_t ScreenTokens(const GumbelScreen& s, const int32_t* ids, int32_t begin, int32_t end,
                     int32_t* out) {
  constexpr int32_t kLanes = V::kScreenLanes;
  int32_t m = 0;
  int32_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    uint32_t mask;
    if (ids != nullptr) {
      mask = V::ScreenMask(s, V::GatherValues(s.values, ids + i), V::LoadIds(ids + i));
    } else {
      mask = V::ScreenMask(s, V::LoadValues(s.values + i), V::IotaIds(i));
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
