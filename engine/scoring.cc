#include "engine/scoring.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/cpu_backend.h"

namespace ridge {

double Perplexity(std::span<const float> logits, std::span<const int32_t> ids, int64_t vocab) {
  if (ids.size() < 2) return 0.0;
  double nll = 0.0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const float* row = logits.data() + t * vocab;
    const float max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - max);
    nll += std::log(sum) + max - row[ids[t + 1]];
  }
  return std::exp(nll / double(ids.size() - 1));
}

absl::StatusOr<ScoreResult> ScoreSequence(const MesaNetModel& model, std::span<const int32_t> ids,
                                          std::optional<int64_t> decode_from,
                                          const SolverOptions& solver) {
  CpuBackend backend(&model, 1);
  return ScoreSequence(backend, ids, decode_from, solver);
}

absl::StatusOr<ScoreResult> ScoreSequence(ModelBackend& backend, std::span<const int32_t> ids,
                                          std::optional<int64_t> decode_from,
                                          const SolverOptions& solver) {
  const int64_t total = static_cast<int64_t>(ids.size());
  const int64_t prefill = decode_from.value_or(total);
  if (total == 0) return absl::InvalidArgumentError("no token ids to score");
  if (prefill < 1 || prefill > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode_from ", prefill, " must be between 1 and the number of ids (", total, ")"));
  }
  const int64_t vocab = backend.config().vocab_size;
  ScoreResult result;
  result.logits.reserve(total * vocab);
  RETURN_IF_ERROR(backend.ResetSlot(0));
  SlotChunk chunk{0, ids.subspan(0, prefill), solver, &result.solver_stats};
  std::vector<float> logits;
  RETURN_IF_ERROR(backend.Forward({&chunk, 1}, LogitsFor::kAllTokens, &logits));
  result.logits.insert(result.logits.end(), logits.begin(), logits.end());
  chunk.phase = SolvePhase::kDecode;
  for (int64_t t = prefill; t < total; ++t) {
    chunk.tokens = ids.subspan(t, 1);
    RETURN_IF_ERROR(backend.Forward({&chunk, 1}, LogitsFor::kLastToken, &logits));
    result.logits.insert(result.logits.end(), logits.begin(), logits.end());
  }
  result.perplexity = Perplexity(result.logits, ids, vocab);
  return result;
}

}  // namespace ridge
