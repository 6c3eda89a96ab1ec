#include "kernels/solver_types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ridge {

absl::Status ValidateSolverOptions(const SolverOptions& options, int32_t max_allowed_iterations) {
  if (!std::isfinite(options.tolerance) || options.tolerance < 0.0f || options.tolerance > 1.0f) {
    return absl::InvalidArgumentError(absl::StrCat("solver tolerance ", options.tolerance,
                                                   " is invalid: expected a number in [0, 1]"));
  }
  if (options.max_iterations < 1 || options.max_iterations > max_allowed_iterations) {
    return absl::InvalidArgumentError(absl::StrCat("solver max_iterations ", options.max_iterations,
                                                   " is invalid: expected 1 to ",
                                                   max_allowed_iterations));
  }
  return absl::OkStatus();
}

}  // namespace ridge
