// Rotary-embedding tables and the attention softmax scale, as DeepSeek's Hugging Face code
// computes them (plain, linear-scaled or YaRN rope).
#ifndef MLASERVE_ENGINE_ROPE_CACHE_H_
#define MLASERVE_ENGINE_ROPE_CACHE_H_

#include <cstdint>
#include <vector>

#include "engine/config.h"

namespace mlaserve {

// Host table [max_positions, rope_dim]: for position p, rope_dim/2 cosines then rope_dim/2
// sines of p * inv_freq[i], multiplied by YaRN's mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) (1 without YaRN). Linear scaling divides positions by factor.
std::vector<float> ComputeRopeCosSin(const ModelConfig& config, int64_t max_positions);

// qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN with mscale_all_dim set.
float AttentionSoftmaxScale(const ModelConfig& config);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_ROPE_CACHE_H_
