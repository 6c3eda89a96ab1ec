#include "models/model_backend.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {

absl::Status ModelBackend::ForwardGreedy(std::span<const SlotChunk> chunks,
                                         std::vector<int32_t>* next_tokens) {
  std::vector<float> logits;
  RETURN_IF_ERROR(Forward(chunks, LogitsFor::kLastToken, &logits));
  const int64_t vocab = config().vocab_size;
  next_tokens->resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    // The sampler's greedy rule: NaN counts as -inf, the lowest id wins ties, 0 if nothing
    // beats -inf.
    const float* row = logits.data() + i * vocab;
    int32_t best = 0;
    float best_value = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < vocab; ++t) {
      if (row[t] > best_value) {
        best_value = row[t];
        best = static_cast<int32_t>(t);
      }
    }
    (*next_tokens)[i] = best;
  }
  return absl::OkStatus();
}

absl::Status ModelBackend::ValidateChunks(std::span<const SlotChunk> chunks) const {
  const int64_t vocab = config().vocab_size;
  std::vector<bool> used(num_slots(), false);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SlotChunk& chunk = chunks[i];
    if (chunk.slot < 0 || chunk.slot >= num_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": slot ", chunk.slot,
                                                     " is outside [0, ", num_slots(), ")"));
    }
    if (used[chunk.slot]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": slot ", chunk.slot, " appears twice in one step"));
    }
    used[chunk.slot] = true;
    if (chunk.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": no tokens to process"));
    }
    RETURN_IF_ERROR(ValidateSolverOptions(chunk.solver, kSolverIterationLimit));
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", i, ": token id ", token, " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ridge
