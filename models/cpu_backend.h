// The CPU backend: the CPU decoder runner (any ModelSpec) over host-memory pools of recurrent
// state slots and KV blocks.
#pragma once

#include <memory>
#include <vector>

#include "models/cpu/decoder.h"
#include "models/mesanet_model.h"
#include "models/model_backend.h"

namespace ridge {

class CpuBackend : public ModelBackend {
 public:
  // `decoder` must outlive the backend. num_kv_blocks is ignored (0) for models without
  // attention layers.
  CpuBackend(const CpuDecoder* decoder, int64_t num_slots, int64_t num_kv_blocks);
  // A MesaNet model's runner (no KV cache).
  CpuBackend(const MesaNetModel* model, int64_t num_slots)
      : CpuBackend(&model->decoder(), num_slots, 0) {}

  std::string_view name() const override { return "cpu"; }
  const ModelSpec& spec() const override { return decoder_->spec(); }
  int64_t num_slots() const override { return static_cast<int64_t>(positions_.size()); }
  int64_t state_bytes_per_slot() const override {
    return decoder_->recurrent_layout().bytes_per_slot();
  }
  const KvLayout& kv_layout() const override { return decoder_->kv_layout(); }
  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  int64_t SlotPosition(int64_t slot) const override { return positions_.at(slot); }

  absl::Status ResetSlot(int64_t slot) override;
  absl::Status CopySlot(int64_t from, int64_t to) override;
  absl::Status CopyKvBlock(int32_t from, int32_t to) override;
  std::string state_format() const override { return "cpu/fp32"; }
  absl::Status ExportSlot(int64_t slot, std::string* bytes) override;
  absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position) override;
  absl::Status ExportKvBlock(int32_t block, std::string* bytes) override;
  absl::Status ImportKvBlock(int32_t block, std::string_view bytes) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;

 private:
  const CpuDecoder* decoder_;
  int64_t floats_per_slot_;
  int64_t num_kv_blocks_;
  std::vector<float> states_;       // [slots, floats_per_slot]
  std::vector<int64_t> positions_;  // per slot
  std::vector<float> kv_storage_;   // [blocks, KvLayout::floats_per_block()]
};

}  // namespace ridge
