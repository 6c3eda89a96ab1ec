// What every forward step requires of one sequence's part, whichever runner or backend takes it.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/solver_types.h"

namespace ridge {

// Tokens present and in [0, vocab), the solver budget valid; errors name sequence `index`.
absl::Status ValidateSequenceInput(size_t index, std::span<const int32_t> tokens,
                                   const SolverOptions& solver, int64_t vocab);

}  // namespace ridge
