// Conjugate gradient for (Hs + diag(lambda)) x = b with a symmetric positive definite Hs,
// as MesaNet solves at every token (spec section 3).
#pragma once

#include "kernels/solver_types.h"

namespace ridge {

enum class CgStart {
  kZero,    // x0 = 0: FLA's prefill kernels
  kJacobi,  // x0 = b / (diag(Hs) + lambda): FLA's decode kernel
};

// hs: d x d row-major (symmetric). x: output, d floats. scratch: 3*d floats.
// Unlike FLA, no 1e-5 is added to the CG denominators: that bias stalls FLA's CG near a
// relative residual of 1e-3, which would make tighter tolerances unreachable. Instead the
// iteration stops when p^T A p or the residual reaches zero (the answer is exact to rounding).
SolveResult ConjugateGradientSolve(const float* hs, const float* lambda, const float* b, int d,
                                   const SolverOptions& options, CgStart start, float* x,
                                   float* scratch);

}  // namespace ridge
