// The arithmetic of drawing a token that the host sampler (engine/sampler.cc) and the device
// (kernels/cuda/sampling.cu) share, so that a seeded request draws the same tokens on every
// backend:
// - rank order: logit descending, then id ascending (RankKey: a larger key ranks first);
// - noise: a counter-based uniform of (seed, position, token) — position = output tokens so
//   far — through SplitMix64, so a draw depends on nothing but the request and the token;
// - the draw: the Gumbel-max trick, argmax over the kept tokens of
//   (logit - max) / temperature + Gumbel(seed, position, token), which samples
//   softmax(logits / temperature) restricted to the kept set exactly.
// Header-only and usable from host and device code.
#ifndef MLASERVE_KERNELS_SAMPLING_MATH_H_
#define MLASERVE_KERNELS_SAMPLING_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MLASERVE_HOST_DEVICE __host__ __device__
#else
#define MLASERVE_HOST_DEVICE
#endif

namespace mlaserve::sampling {

// How one row is drawn (TopLogprobs' sibling op SampleTokens reads these from device memory,
// eight 4-byte words a row). temperature 0 means the argmax; top_k 0 and top_p 1 and min_p 0
// mean no cut.
struct RowOptions {
  float temperature;
  float top_p;
  float min_p;
  int32_t top_k;
  uint32_t seed_low;
  uint32_t seed_high;
  int32_t position;  // output tokens so far
  int32_t unused;
};
static_assert(sizeof(RowOptions) == 8 * sizeof(int32_t), "eight i32 words a row");

// SplitMix64's increment (the golden ratio in 64 bits) and multipliers; the CPU kernels'
// vector screen (kernels/cpu/cpu_gumbel_screen.h) hashes with the same ones.
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;
inline constexpr uint64_t kSplitMixMul1 = 0xbf58476d1ce4e5b9ull;
inline constexpr uint64_t kSplitMixMul2 = 0x94d049bb133111ebull;
// 2^-53: a 53-bit integer times it is in [0, 1).
inline constexpr double kUniformScale = 1.0 / 9007199254740992.0;

MLASERVE_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += kSplitMixGamma;
  x = (x ^ (x >> 30)) * kSplitMixMul1;
  x = (x ^ (x >> 27)) * kSplitMixMul2;
  return x ^ (x >> 31);
}

// The stream every token of one (seed, position) row draws from.
MLASERVE_HOST_DEVICE inline uint64_t RowStream(uint64_t seed, uint64_t position) {
  return SplitMix64(SplitMix64(seed) ^ (position * 0xd1b54a32d192ed03ull));
}

// Uniform in (0, 1), 53 random bits, never 0 or 1: token's draw from a row's stream.
MLASERVE_HOST_DEVICE inline double StreamUniform(uint64_t stream, uint32_t token) {
  const uint64_t bits = SplitMix64(stream ^ (uint64_t{token} * kSplitMixGamma));
  return (static_cast<double>(bits >> 11) + 0.5) * kUniformScale;
}

MLASERVE_HOST_DEVICE inline double TokenUniform(uint64_t seed, uint64_t position, uint32_t token) {
  return StreamUniform(RowStream(seed, position), token);
}

MLASERVE_HOST_DEVICE inline double StreamGumbel(uint64_t stream, uint32_t token) {
  return -::log(-::log(StreamUniform(stream, token)));
}

MLASERVE_HOST_DEVICE inline double Gumbel(uint64_t seed, uint64_t position, uint32_t token) {
  return StreamGumbel(RowStream(seed, position), token);
}

// A key that orders (value, id) by rank: larger value first, then lower id.
MLASERVE_HOST_DEVICE inline uint64_t RankKey(float value, int32_t id) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (uint64_t{ordered} << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

// Relative probability exp((value - max) / temperature), in double.
MLASERVE_HOST_DEVICE inline double RelativeProbability(float value, float max, float temperature) {
  return ::exp((static_cast<double>(value) - max) / temperature);
}

// The Gumbel-max score of a kept token, its row's stream (RowStream) computed once.
MLASERVE_HOST_DEVICE inline double StreamDrawScore(float value, float max, float temperature,
                                                   uint64_t stream, int32_t id) {
  return (static_cast<double>(value) - max) / temperature +
         StreamGumbel(stream, static_cast<uint32_t>(id));
}

// The Gumbel-max score of a kept token.
MLASERVE_HOST_DEVICE inline double DrawScore(float value, float max, float temperature,
                                             uint64_t seed, uint64_t position, int32_t id) {
  return StreamDrawScore(value, max, temperature, RowStream(seed, position), id);
}

}  // namespace mlaserve::sampling

#endif  // MLASERVE_KERNELS_SAMPLING_MATH_H_
