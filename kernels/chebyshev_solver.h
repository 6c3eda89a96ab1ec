// Chebyshev iteration for Gated KalmaNet's ridge system (H + lam I) x = q on the CPU
// (shared/specs/gka-hybrid-qwen3.md, section 4), with the per-request budget of SolverOptions.
#pragma once

#include "kernels/solver_types.h"

namespace ridge {

// Solves (h + lam I) x = q for a symmetric positive semi-definite d x d `h` whose Frobenius
// norm is `frobenius` (> 0), with lam = ridge_strength * frobenius and the eigenvalue bounds
// [lam, frobenius + lam]. Stops before an update when ||h x + lam x - q|| <= tolerance * ||q||
// (never when tolerance is 0) or after options.max_iterations updates. relative_residual is
// ||res|| / ||q|| of the last residual computed (the one before the last update when capped).
// x: [d] out; scratch: 2 * d floats.
SolveResult ChebyshevSolve(const float* h, int d, float ridge_strength, float frobenius,
                           const float* q, const SolverOptions& options, float* x, float* scratch);

}  // namespace ridge
