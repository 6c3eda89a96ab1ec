// The MesaNet forward pass on the CPU (spec: shared/specs/mesanet.md, section 2).
//
// One call advances any number of sequences by any number of tokens each: the projections,
// norms and MLP run as single matrix products over all tokens of all sequences, and the
// per-head recurrence with its CG solve runs in parallel over (sequence, head) pairs.
// Prefill, chunked prefill and batched decode are all this one call.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "models/mesanet_config.h"
#include "models/mesanet_state.h"
#include "models/mesanet_weights.h"

namespace ridge {

// Where CG starts, as FLA does: prefill from zero, decode from the Jacobi guess.
enum class SolvePhase { kPrefill, kDecode };

enum class LogitsFor { kAllTokens, kLastToken };

struct SequenceChunk {
  MesaState* state = nullptr;
  std::span<const int32_t> tokens;
  SolverOptions solver;
  SolverStats* stats = nullptr;  // optional: every solve of this chunk is added here
  SolvePhase phase = SolvePhase::kPrefill;
};

class MesaNetModel {
 public:
  static absl::StatusOr<std::unique_ptr<MesaNetModel>> Load(const std::filesystem::path& dir);
  // A model in the shape of dir/config.json (no weights read) with RandomMesaNetWeights(seed):
  // for measuring a configuration without its checkpoint.
  static absl::StatusOr<std::unique_ptr<MesaNetModel>> Random(const std::filesystem::path& dir,
                                                              uint64_t seed);
  MesaNetModel(MesaNetConfig config, MesaNetWeights weights);

  const MesaNetConfig& config() const { return config_; }
  const MesaNetWeights& weights() const { return weights_; }
  MesaState NewState() const { return MesaState(config_); }

  // Advances every chunk's state over its tokens. `logits` receives [rows, vocab] floats:
  // one row per token (kAllTokens) or one per chunk for its last token (kLastToken).
  // Prefill chunks and decode tokens may share one call.
  absl::Status Forward(std::span<const SequenceChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) const;

 private:
  struct Batch;
  void RunLayer(int64_t layer, std::span<const SequenceChunk> chunks, Batch& batch) const;
  void ShortConvolution(int64_t layer, std::span<const SequenceChunk> chunks, Batch& batch) const;
  void Recurrence(int64_t layer, std::span<const SequenceChunk> chunks, Batch& batch) const;

  MesaNetConfig config_;
  MesaNetWeights weights_;
};

}  // namespace ridge
