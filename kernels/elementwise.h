// Row-wise and element-wise float ops used by the CPU forward pass.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace ridge {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x * Sigmoid(x); }
// PyTorch's softplus: linear above 20 to avoid overflow.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Greedy decoding's choice: the id of the largest logit, NaN counting as -inf, the lowest id on
// ties, and 0 when nothing beats -inf. (The GPU's ArgmaxRowsKernel follows the same rule.)
inline int32_t GreedyToken(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < logits.size(); ++t) {
    if (logits[t] > best_value) {  // false for NaN
      best_value = logits[t];
      best = static_cast<int32_t>(t);
    }
  }
  return best;
}

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for `rows` rows of `width`.
// out may alias x.
void RmsNormRows(const float* x, const float* weight, int64_t rows, int width, float eps,
                 float* out);

// v /= sqrt(sum(v^2) + eps) for each of `groups` consecutive groups of `width`.
void L2NormalizeGroups(float* v, int64_t groups, int width, float eps);

// out[i] = silu(gate[i]) * up[i] for the SwiGLU MLP; gate and up are the two halves of each
// row of `fused` ([rows, 2 * width]); out is [rows, width].
void SwiGluRows(const float* fused, int64_t rows, int width, float* out);

}  // namespace ridge
