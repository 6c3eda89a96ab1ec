#include "kernels/chebyshev_solver.h"

#include <cmath>

#include "base/multiversion.h"

namespace ridge {
namespace {

// row . x with eight running sums, so the compiler vectorises it (a single float sum is a chain
// it may not reorder).
inline float Dot(const float* row, const float* x, int d) {
  float part[8] = {};
  int j = 0;
  for (; j + 8 <= d; j += 8) {
    for (int lane = 0; lane < 8; ++lane) part[lane] += row[j + lane] * x[j + lane];
  }
  float sum =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; j < d; ++j) sum += row[j] * x[j];
  return sum;
}

}  // namespace

// Built for AVX2 as well as baseline x86-64; the loader picks the clone the CPU supports.
RIDGE_AVX2_CLONES SolveResult ChebyshevSolve(const float* h, int d, float ridge_strength,
                                             float frobenius, const float* q,
                                             const SolverOptions& options, float* x,
                                             float* scratch) {
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
      res[i] = Dot(h + static_cast<long>(i) * d, x, d) + lam * x[i] - q[i];
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
