#include "models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ridge {
namespace {

// The dimension whose wavelength makes `rotations` turns over `max_positions` (yarn).
double CorrectionDim(double rotations, int64_t dim, double base, int64_t max_positions) {
  return dim * std::log(max_positions / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

std::vector<double> RopeInverseFrequencies(const RopeSpec& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(rope.theta, static_cast<double>(2 * i) / head_dim);
  }
  if (rope.type == RopeSpec::Type::kDefault) return inv_freq;

  // yarn: interpolate (divide by the factor) the low frequencies, keep the high ones, with a
  // linear ramp between the correction dimensions of beta_fast and beta_slow turns.
  double low = CorrectionDim(rope.beta_fast, head_dim, rope.theta, rope.original_max_position);
  double high = CorrectionDim(rope.beta_slow, head_dim, rope.theta, rope.original_max_position);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(head_dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    inv_freq[i] = inv_freq[i] / rope.factor * (1.0 - extrapolation_weight) +
                  inv_freq[i] * extrapolation_weight;
  }
  return inv_freq;
}

void RopeAngles(const RopeSpec& rope, const std::vector<double>& inv_freq, int64_t position,
                float* cos, float* sin) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(angle) * rope.attention_factor);
    sin[i] = static_cast<float>(std::sin(angle) * rope.attention_factor);
  }
}

}  // namespace ridge
