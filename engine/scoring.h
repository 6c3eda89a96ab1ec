// Teacher-forced scoring: the logits of every position of a token sequence, through the prefill
// path alone or through prefill then one-token decode steps. Used for evaluation (perplexity)
// and to check the engine against reference logits.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "models/model.h"
#include "models/model_backend.h"

namespace ridge {

struct ScoreResult {
  std::vector<float> logits;  // [tokens, vocab], row t predicts token t+1
  double perplexity = 0.0;    // over the tokens 1..T-1; 0 when T = 1
  SolverStats solver_stats;
};

// decode_from = N: prefill tokens [0, N) in one call, then feed the rest one at a time through
// the decode path. Without it, all tokens are one prefill. Runs in the backend's slot 0 (reset
// first) and, for models with attention layers, its first KV blocks.
absl::StatusOr<ScoreResult> ScoreSequence(ModelBackend& backend, std::span<const int32_t> ids,
                                          std::optional<int64_t> decode_from,
                                          const SolverOptions& solver);

// The same on the CPU.
absl::StatusOr<ScoreResult> ScoreSequence(const Model& model, std::span<const int32_t> ids,
                                          std::optional<int64_t> decode_from,
                                          const SolverOptions& solver);

// exp(mean negative log-likelihood of ids[t+1] under logits row t).
double Perplexity(std::span<const float> logits, std::span<const int32_t> ids, int64_t vocab);

}  // namespace ridge
