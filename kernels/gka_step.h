// One token of one Gated KalmaNet head on the CPU (shared/specs/gka-hybrid-qwen3.md, section 3):
// the decayed rank-1 updates of Hs and Ss, the adaptive ridge, the Chebyshev solve, the alpha
// connection and the readout (before o_norm and the output gate).
#pragma once

#include <optional>

#include "kernels/solver_types.h"

namespace ridge {

struct GkaHeadInputs {
  const float* q;   // [d], L2-normalised
  const float* k;   // [d], L2-normalised
  const float* v;   // [d]
  float beta;       // sigmoid(b) + 1e-6: scales k and v
  float alpha;      // sigmoid(alpha_proj): the alpha connection's weight
  float log_decay;  // g = -exp(A_log) * softplus(a + dt_bias) <= 0
  float ridge_strength;
  bool solve;  // false when num_iter is 0: the readout uses q itself and alpha is not applied
};

// hs, ss: the head's d x d fp32 state (Ss row = key index), updated in place.
// out: [d] = d^-0.5 * Ss^T q~. scratch: 4 * d floats. Returns the solve's result, or nothing
// when no solve ran.
std::optional<SolveResult> GkaHeadStep(const GkaHeadInputs& in, int d, const SolverOptions& options,
                                       float* hs, float* ss, float* out, float* scratch);

}  // namespace ridge
