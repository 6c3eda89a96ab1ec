#include "kernels/short_convolution.h"

#include <algorithm>
#include <vector>

#include "kernels/elementwise.h"

namespace ridge {

void CausalConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels,
                    const float* weight, int64_t width, float* tail, float* out,
                    int64_t out_stride) {
  const int64_t tail_rows = width - 1;
  // Raw value of channel c at chunk position s (s < 0 reaches into the tail).
  auto raw = [&](int64_t s, int64_t c) {
    return s >= 0 ? x[s * x_stride + c] : tail[(tail_rows + s) * channels + c];
  };
#pragma omp parallel for if (n * channels > 16384)
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * out_stride;
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (int64_t j = 0; j < width; ++j) sum += weight[c * width + j] * raw(t - tail_rows + j, c);
      o[c] = Silu(sum);
    }
  }
  std::vector<float> new_tail(tail_rows * channels);
  for (int64_t r = 0; r < tail_rows; ++r) {
    for (int64_t c = 0; c < channels; ++c) new_tail[r * channels + c] = raw(n - tail_rows + r, c);
  }
  std::copy(new_tail.begin(), new_tail.end(), tail);
}

}  // namespace ridge
