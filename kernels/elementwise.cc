#include "kernels/elementwise.h"

namespace ridge {

void RmsNormRows(const float* x, const float* weight, int64_t rows, int width, float eps,
                 float* out) {
#pragma omp parallel for if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * width;
    float* o = out + r * width;
    double sum = 0.0;
    for (int i = 0; i < width; ++i) sum += double(in[i]) * in[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / width) + eps);
    for (int i = 0; i < width; ++i) o[i] = in[i] * scale * weight[i];
  }
}

void L2NormalizeGroups(float* v, int64_t groups, int width, float eps) {
  for (int64_t g = 0; g < groups; ++g) {
    float* x = v + g * width;
    double sum = 0.0;
    for (int i = 0; i < width; ++i) sum += double(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum) + eps);
    for (int i = 0; i < width; ++i) x[i] *= scale;
  }
}

void SwiGluRows(const float* fused, int64_t rows, int width, float* out) {
#pragma omp parallel for if (rows > 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = fused + r * 2 * width;
    const float* up = gate + width;
    float* o = out + r * width;
    for (int i = 0; i < width; ++i) o[i] = Silu(gate[i]) * up[i];
  }
}

}  // namespace ridge
