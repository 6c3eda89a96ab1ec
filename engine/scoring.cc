#include "engine/scoring.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/kv_block_pool.h"
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

absl::StatusOr<ScoreResult> ScoreSequence(const Model& model, std::span<const int32_t> ids,
                                          std::optional<int64_t> decode_from,
                                          const SolverOptions& solver) {
  const int64_t blocks = model.decoder().kv_layout().BlocksFor(static_cast<int64_t>(ids.size()));
  CpuBackend backend(&model.decoder(), 1, blocks);
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
  const int64_t vocab = backend.spec().vocab_size;
  ScoreResult result;
  result.logits.reserve(total * vocab);
  RETURN_IF_ERROR(backend.ResetSlot(0));
  const KvLayout& kv = backend.kv_layout();
  KvBlockPool pool(backend.num_kv_blocks());
  BlockTable table;
  if (!table.Grow(kv, total, pool)) {
    return absl::OutOfRangeError(absl::StrCat(total, " tokens need ", kv.BlocksFor(total),
                                              " KV blocks; the ", std::string(backend.name()),
                                              " backend has ", backend.num_kv_blocks()));
  }
  SlotChunk chunk{0, ids.subspan(0, prefill), solver, &result.solver_stats};
  chunk.kv_blocks = table.entries();
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
