#include "kernels/chebyshev_solver.h"

#include <cmath>

namespace ridge {

SolveResult ChebyshevSolve(const float* h, int d, float ridge_strength, float frobenius,
                           const float* q, const SolverOptions& options, float* x, float* scratch) {
  float* x_prev = scratch;
  float* res = scratch + d;
  const float lam = ridge_strength * frobenius;
  const float step = 2.0f / (2.0f * lam + frobenius);
  const float half_ratio = frobenius / (2.0f * lam + frobenius) / 2.0f;
  const float r4 = half_ratio * half_ratio;
  double q_norm2 = 0.0;
  for (int i = 0; i < d; ++i) {
    x_prev[i] = 0.0f;
    x[i] = step * q[i];
    q_norm2 += double(q[i]) * q[i];
  }
  const double q_norm = std::sqrt(q_norm2);
  const double stop2 = double(options.tolerance) * options.tolerance * q_norm2;
  SolveResult result;
  float w = 2.0f;
  for (int iteration = 0;; ++iteration) {
    double res_norm2 = 0.0;
    for (int i = 0; i < d; ++i) {
      const float* row = h + static_cast<long>(i) * d;
      float sum = 0.0f;
      for (int j = 0; j < d; ++j) sum += row[j] * x[j];
      res[i] = sum + lam * x[i] - q[i];
      res_norm2 += double(res[i]) * res[i];
    }
    result.relative_residual = q_norm > 0 ? static_cast<float>(std::sqrt(res_norm2) / q_norm) : 0;
    if (options.tolerance > 0.0f && res_norm2 <= stop2) break;
    if (iteration == options.max_iterations) {
      result.capped = options.tolerance > 0.0f;
      break;
    }
    w = 1.0f / (1.0f - r4 * w);
    for (int i = 0; i < d; ++i) {
      const float update = step * w * res[i] + (w - 1.0f) * x_prev[i];
      x_prev[i] = x[i];
      x[i] = w * x[i] - update;
    }
    result.iterations = iteration + 1;
  }
  return result;
}

}  // namespace ridge
