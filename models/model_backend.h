// Where a model's forward pass runs and where its per-sequence states live: the engine talks to
// this interface, so the scheduler is the same on the CPU and on a GPU. A backend owns a fixed
// pool of state slots; each step names the slot of every sequence it advances.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kernels/solver_types.h"
#include "models/mesanet_config.h"
#include "models/mesanet_model.h"

namespace ridge {

struct SlotChunk {
  int64_t slot = 0;
  std::span<const int32_t> tokens;
  SolverOptions solver;
  SolverStats* stats = nullptr;  // optional: every solve of this chunk is added here
  SolvePhase phase = SolvePhase::kPrefill;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual std::string_view name() const = 0;  // "cpu" or "cuda"
  virtual const MesaNetConfig& config() const = 0;
  virtual int64_t num_slots() const = 0;

  // Clears a slot to the start of a sequence.
  virtual absl::Status ResetSlot(int64_t slot) = 0;

  // Advances every chunk's slot over its tokens; one chunk per slot at most. `logits` receives
  // [rows, vocab] floats, rows as MesaNetModel::Forward describes.
  virtual absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                               std::vector<float>* logits) = 0;

  // Like Forward with kLastToken, but returns only each chunk's most likely next token (the
  // lowest id among ties). A GPU backend does this without copying logits to the host.
  virtual absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                                     std::vector<int32_t>* next_tokens);

 protected:
  // Checks what every backend requires of a step: slots in range and distinct, tokens present
  // and in the vocabulary, solver options valid.
  absl::Status ValidateChunks(std::span<const SlotChunk> chunks) const;
  // An error naming the slot unless 0 <= slot < num_slots().
  absl::Status CheckSlot(int64_t slot) const;
};

}  // namespace ridge
