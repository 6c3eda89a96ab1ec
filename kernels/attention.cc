#include "kernels/attention.h"

#include <cmath>
#include <limits>

namespace ridge {

void PagedAttentionHead(const float* q, int d, float scale, const PagedKvHead& kv, int64_t first,
                        int64_t last, float* scores, float* out) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t p = first; p <= last; ++p) {
    const float* key = kv.key(p);
    float dot = 0.0f;
    for (int i = 0; i < d; ++i) dot += q[i] * key[i];
    scores[p - first] = dot * scale;
    max = std::fmax(max, scores[p - first]);
  }
  double sum = 0.0;
  for (int64_t p = first; p <= last; ++p) {
    scores[p - first] = std::exp(scores[p - first] - max);
    sum += scores[p - first];
  }
  for (int i = 0; i < d; ++i) out[i] = 0.0f;
  const float inverse = static_cast<float>(1.0 / sum);
  for (int64_t p = first; p <= last; ++p) {
    const float* value = kv.value(p);
    const float weight = scores[p - first] * inverse;
    for (int i = 0; i < d; ++i) out[i] += weight * value[i];
  }
}

void ApplyRotaryHalf(float* x, int d, const float* cos, const float* sin) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

}  // namespace ridge
