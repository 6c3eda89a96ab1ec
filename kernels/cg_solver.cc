#include "kernels/cg_solver.h"

#include <cmath>

#include "base/multiversion.h"

namespace ridge {
namespace {

inline float Dot(const float* a, const float* b, int d) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

// out = (Hs + diag(lambda)) v. Hs is symmetric, so row i is column i.
inline void ApplySystem(const float* hs, const float* lambda, const float* v, int d, float* out) {
  for (int i = 0; i < d; ++i)
    out[i] = Dot(hs + static_cast<size_t>(i) * d, v, d) + lambda[i] * v[i];
}

}  // namespace

// Built for AVX2 as well as baseline x86-64; the loader picks the clone the CPU supports.
RIDGE_AVX2_CLONES SolveResult ConjugateGradientSolve(const float* hs, const float* lambda,
                                                     const float* b, int d,
                                                     const SolverOptions& options, CgStart start,
                                                     float* x, float* scratch) {
  float* r = scratch;
  float* p = scratch + d;
  float* ap = scratch + 2 * d;

  if (start == CgStart::kJacobi) {
    for (int i = 0; i < d; ++i) {
      x[i] = b[i] / (hs[static_cast<size_t>(i) * d + i] + lambda[i]);
    }
    ApplySystem(hs, lambda, x, d, ap);
    for (int i = 0; i < d; ++i) r[i] = b[i] - ap[i];
  } else {
    for (int i = 0; i < d; ++i) {
      x[i] = 0.0f;
      r[i] = b[i];
    }
  }
  for (int i = 0; i < d; ++i) p[i] = r[i];

  float delta = Dot(r, r, d);
  const float initial_norm = std::sqrt(delta);
  SolveResult result;
  if (initial_norm == 0.0f) return result;  // x0 is exact

  const float tolerance = options.tolerance;
  const float stop_norm = tolerance * initial_norm;
  auto converged = [&](float delta_now) {
    return tolerance > 0.0f && std::sqrt(delta_now) <= stop_norm;
  };

  int iteration = 0;
  if (!converged(delta)) {
    for (; iteration < options.max_iterations; ++iteration) {
      ApplySystem(hs, lambda, p, d, ap);
      const float p_ap = Dot(p, ap, d);
      // A is SPD, so p^T A p <= 0 only when p vanished: the residual is at rounding level.
      if (!(p_ap > 0.0f)) break;
      const float alpha = delta / p_ap;
      for (int i = 0; i < d; ++i) {
        x[i] += alpha * p[i];
        r[i] -= alpha * ap[i];
      }
      const float delta_new = Dot(r, r, d);
      const float beta = delta_new / delta;
      for (int i = 0; i < d; ++i) p[i] = r[i] + beta * p[i];
      delta = delta_new;
      if (delta == 0.0f || converged(delta)) {
        ++iteration;
        break;
      }
    }
  }
  result.iterations = iteration;
  result.relative_residual = std::sqrt(delta) / initial_norm;
  result.capped = iteration >= options.max_iterations && !converged(delta);
  return result;
}

}  // namespace ridge
