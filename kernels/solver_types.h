// The solver budget a request sets, what one solve reports, and their aggregation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"

namespace ridge {

// One budget, two stopping rules, both relative to the size of the problem:
// - conjugate gradient (MesaNet): stop at iteration j when ||r_j|| <= tolerance * ||r_0||
//   (the paper's dynamic rule);
// - Chebyshev (Gated KalmaNet): stop before an update when ||A x - q|| <= tolerance * ||q||.
// Either stops after max_iterations; tolerance 0 always runs max_iterations (the references'
// fixed count). No request, flag or config may ask for more iterations than this: bounded
// compute per token.
inline constexpr int32_t kSolverIterationLimit = 1000;

struct SolverOptions {
  float tolerance = 0.0f;
  int32_t max_iterations = 30;
};

// Both fields must be finite and within [0, 1] and [1, max_allowed_iterations].
absl::Status ValidateSolverOptions(const SolverOptions& options, int32_t max_allowed_iterations);

struct SolveResult {
  int32_t iterations = 0;
  float relative_residual = 0.0f;  // ||r_final|| / ||r_0||, 0 when r_0 = 0
  bool capped = false;             // stopped by max_iterations before reaching the tolerance
};

struct SolverStats {
  int64_t solves = 0;
  int64_t total_iterations = 0;
  int32_t max_iterations = 0;
  int64_t capped = 0;
  double sum_relative_residual = 0.0;
  float max_relative_residual = 0.0f;

  void Add(const SolveResult& r) {
    ++solves;
    total_iterations += r.iterations;
    max_iterations = std::max(max_iterations, r.iterations);
    capped += r.capped ? 1 : 0;
    sum_relative_residual += r.relative_residual;
    max_relative_residual = std::max(max_relative_residual, r.relative_residual);
  }
  void Merge(const SolverStats& o) {
    solves += o.solves;
    total_iterations += o.total_iterations;
    max_iterations = std::max(max_iterations, o.max_iterations);
    capped += o.capped;
    sum_relative_residual += o.sum_relative_residual;
    max_relative_residual = std::max(max_relative_residual, o.max_relative_residual);
  }
  double MeanIterations() const { return solves ? double(total_iterations) / solves : 0.0; }
  double CappedFraction() const { return solves ? double(capped) / solves : 0.0; }
  double MeanRelativeResidual() const { return solves ? sum_relative_residual / solves : 0.0; }
};

}  // namespace ridge
