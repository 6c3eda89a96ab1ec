// The CPU backend: MesaNetModel's forward pass over a pool of MesaState values.
#pragma once

#include <memory>
#include <vector>

#include "models/mesanet_model.h"
#include "models/model_backend.h"

namespace ridge {

class CpuBackend : public ModelBackend {
 public:
  // `model` must outlive the backend.
  CpuBackend(const MesaNetModel* model, int64_t num_slots);

  std::string_view name() const override { return "cpu"; }
  const MesaNetConfig& config() const override { return model_->config(); }
  int64_t num_slots() const override { return static_cast<int64_t>(slots_.size()); }
  absl::Status ResetSlot(int64_t slot) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;

 private:
  const MesaNetModel* model_;
  std::vector<MesaState> slots_;
};

}  // namespace ridge
