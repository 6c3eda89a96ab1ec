// A MesaNet model: its config and the CPU decoder runner with a MesaMixer per layer (spec:
// shared/specs/mesanet.md, section 2) over its weights, which stay where the checkpoint is mapped
// (in its own dtype) or are the host fp32 weights it was built from. Forward runs MesaState
// values through that runner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "models/checkpoint.h"
#include "models/cpu/decoder.h"
#include "models/mesanet_config.h"
#include "models/mesanet_state.h"
#include "models/mesanet_weights.h"
#include "models/model.h"

namespace ridge {

struct SequenceChunk {
  MesaState* state = nullptr;
  std::span<const int32_t> tokens;
  SolverOptions solver;
  SolverStats* stats = nullptr;  // optional: every solve of this chunk is added here
  SolvePhase phase = SolvePhase::kPrefill;
};

class MesaNetModel : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<MesaNetModel>> Load(const std::filesystem::path& dir);
  // A model in the shape of dir/config.json (no weights read) with RandomMesaNetWeights(seed):
  // for measuring a configuration without its checkpoint.
  static absl::StatusOr<std::unique_ptr<MesaNetModel>> Random(const std::filesystem::path& dir,
                                                              uint64_t seed);
  // A model over host fp32 weights (random ones, tests).
  MesaNetModel(MesaNetConfig config, MesaNetWeights weights);
  MesaNetModel(const MesaNetModel&) = delete;  // the runner points into the weights
  MesaNetModel& operator=(const MesaNetModel&) = delete;

  const MesaNetConfig& config() const { return config_; }
  // fp32 host weights with fused projections, for the CUDA backend to upload: widened from the
  // checkpoint at each call, or a copy of the ones the model was built from.
  MesaNetWeights HostWeights() const;
  const CpuDecoder& decoder() const override { return *decoder_; }
  const MesaNetModel* mesanet() const override { return this; }
  MesaState NewState() const { return MesaState(config_); }

  // Advances every chunk's state over its tokens. `logits` receives [rows, vocab] floats:
  // one row per token (kAllTokens) or one per chunk for its last token (kLastToken).
  // Prefill chunks and decode tokens may share one call.
  absl::Status Forward(std::span<const SequenceChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) const;

 private:
  MesaNetModel(MesaNetConfig config, std::unique_ptr<Checkpoint> checkpoint, MesaNetView view);
  void BuildDecoder();

  MesaNetConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;  // when loaded: mapped, the view points into it
  MesaNetWeights host_;                     // otherwise: the view points into these
  MesaNetView view_;
  std::unique_ptr<CpuDecoder> decoder_;
};

}  // namespace ridge
