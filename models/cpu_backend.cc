#include "models/cpu_backend.h"

#include "base/status_macros.h"

namespace ridge {

CpuBackend::CpuBackend(const MesaNetModel* model, int64_t num_slots) : model_(model) {
  slots_.reserve(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) slots_.push_back(model->NewState());
}

absl::Status CpuBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  slots_[slot].Reset();
  return absl::OkStatus();
}

absl::Status CpuBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                 std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  std::vector<SequenceChunk> sequences;
  sequences.reserve(chunks.size());
  for (const SlotChunk& c : chunks) {
    sequences.push_back({&slots_[c.slot], c.tokens, c.solver, c.stats, c.phase});
  }
  return model_->Forward(sequences, which, logits);
}

}  // namespace ridge
