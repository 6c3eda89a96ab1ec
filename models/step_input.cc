#include "models/step_input.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {

absl::Status ValidateSequenceInput(size_t index, std::span<const int32_t> tokens,
                                   const SolverOptions& solver, int64_t vocab) {
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", index, ": no tokens to process"));
  }
  RETURN_IF_ERROR(ValidateSolverOptions(solver, kSolverIterationLimit));
  for (int32_t token : tokens) {
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", index, ": token id ", token, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ridge
