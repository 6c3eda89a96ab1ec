// One token of one MesaNet head on the CPU (spec section 2): the decayed rank-1 updates of
// Hs and Gs, the CG solve of (Hs + diag(lambda)) x = q, and the readout o = Gs^T x.
#pragma once

#include "kernels/cg_solver.h"

namespace ridge {

struct MesaHeadInputs {
  const float* q;       // [d], L2-normalised
  const float* k;       // [d], L2-normalised
  const float* v;       // [d]
  const float* lambda;  // [d], softplus(lambda_params) + lower bound
  float gamma;          // forget gate in (0, 1)
  float beta;           // input gate in (0, 1)
};

// hs, gs: the head's d x d state, updated in place. out: [d]. scratch: 4 * d floats.
SolveResult MesaHeadStep(const MesaHeadInputs& in, int d, const SolverOptions& options,
                         CgStart start, float* hs, float* gs, float* out, float* scratch);

}  // namespace ridge
