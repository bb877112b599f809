#include "engine/rope_cache.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mlaserve {
namespace {

double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// The rotary dimension whose wavelength completes `num_rotations` turns over max_positions.
double YarnCorrectionDim(double num_rotations, int64_t dim, double base, int64_t max_positions) {
  return (static_cast<double>(dim) *
          std::log(static_cast<double>(max_positions) / (num_rotations * 2 * std::numbers::pi))) /
         (2 * std::log(base));
}

// Inverse frequencies computed in f32, as torch does, so that cos/sin match to the last bit
// as far as the f32 argument allows.
std::vector<float> InverseFrequencies(const ModelConfig& c) {
  const int64_t dim = c.qk_rope_head_dim;
  const int64_t half = dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  if (c.rope_scaling.type != RopeScalingType::kYarn) return inv;

  const RopeScaling& y = c.rope_scaling;
  double low = std::floor(
      YarnCorrectionDim(y.beta_fast, dim, c.rope_theta, y.original_max_position_embeddings));
  double high = std::ceil(
      YarnCorrectionDim(y.beta_slow, dim, c.rope_theta, y.original_max_position_embeddings));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp(
        static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_mask = 1.0f - ramp;
    const float interpolated = inv[i] / static_cast<float>(y.factor);
    inv[i] = interpolated * (1.0f - extrapolation_mask) + inv[i] * extrapolation_mask;
  }
  return inv;
}

}  // namespace

std::vector<float> ComputeRopeCosSin(const ModelConfig& c, int64_t max_positions) {
  const int64_t dim = c.qk_rope_head_dim;
  const int64_t half = dim / 2;
  const std::vector<float> inv = InverseFrequencies(c);
  float mscale = 1.0f;
  float position_divisor = 1.0f;
  if (c.rope_scaling.type == RopeScalingType::kYarn) {
    mscale = static_cast<float>(YarnMscale(c.rope_scaling.factor, c.rope_scaling.mscale) /
                                YarnMscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim));
  } else if (c.rope_scaling.type == RopeScalingType::kLinear) {
    position_divisor = static_cast<float>(c.rope_scaling.factor);
  }
  std::vector<float> table(static_cast<size_t>(max_positions * dim));
  for (int64_t p = 0; p < max_positions; ++p) {
    const float t = static_cast<float>(p) / position_divisor;
    float* row = table.data() + p * dim;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = t * inv[i];
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * mscale;
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * mscale;
    }
  }
  return table;
}

float AttentionSoftmaxScale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (c.rope_scaling.type == RopeScalingType::kYarn && c.rope_scaling.mscale_all_dim != 0.0) {
    const double m = YarnMscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

}  // namespace mlaserve
