#include "kernels/mesa_step.h"

#include "base/multiversion.h"

namespace ridge {

// Built for AVX2 as well as baseline x86-64; the loader picks the clone the CPU supports.
RIDGE_AVX2_CLONES SolveResult MesaHeadStep(const MesaHeadInputs& in, int d,
                                           const SolverOptions& options, CgStart start, float* hs,
                                           float* gs, float* out, float* scratch) {
  for (int i = 0; i < d; ++i) {
    const float bk = in.beta * in.k[i];
    float* hs_row = hs + static_cast<size_t>(i) * d;
    float* gs_row = gs + static_cast<size_t>(i) * d;
#pragma omp simd
    for (int j = 0; j < d; ++j) {
      hs_row[j] = in.gamma * hs_row[j] + bk * in.k[j];
      gs_row[j] = in.gamma * gs_row[j] + bk * in.v[j];
    }
  }
  float* x = scratch;
  const SolveResult result =
      ConjugateGradientSolve(hs, in.lambda, in.q, d, options, start, x, scratch + d);
  for (int j = 0; j < d; ++j) out[j] = 0.0f;
  for (int i = 0; i < d; ++i) {
    const float xi = x[i];
    const float* gs_row = gs + static_cast<size_t>(i) * d;
#pragma omp simd
    for (int j = 0; j < d; ++j) out[j] += xi * gs_row[j];
  }
  return result;
}

}  // namespace ridge
