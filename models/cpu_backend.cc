#include "models/cpu_backend.h"

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"

namespace ridge {

CpuBackend::CpuBackend(const CpuDecoder* decoder, int64_t num_slots, int64_t num_kv_blocks)
    : decoder_(decoder),
      floats_per_slot_(decoder->recurrent_layout().floats_per_slot),
      num_kv_blocks_(decoder->kv_layout().empty() ? 0 : num_kv_blocks),
      states_(num_slots * floats_per_slot_, 0.0f),
      positions_(num_slots, 0),
      kv_storage_(num_kv_blocks_ * decoder->kv_layout().floats_per_block(), 0.0f) {}

absl::Status CpuBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  std::fill_n(states_.begin() + slot * floats_per_slot_, floats_per_slot_, 0.0f);
  positions_[slot] = 0;
  return absl::OkStatus();
}

absl::Status CpuBackend::CopySlot(int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckSlot(from));
  RETURN_IF_ERROR(CheckSlot(to));
  if (from == to) return absl::OkStatus();
  std::copy_n(states_.begin() + from * floats_per_slot_, floats_per_slot_,
              states_.begin() + to * floats_per_slot_);
  positions_[to] = positions_[from];
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyKvBlock(int32_t from, int32_t to) {
  if (num_kv_blocks_ == 0) return ModelBackend::CopyKvBlock(from, to);
  RETURN_IF_ERROR(CheckKvBlock(from));
  RETURN_IF_ERROR(CheckKvBlock(to));
  const int64_t floats = decoder_->kv_layout().floats_per_block();
  std::copy_n(kv_storage_.begin() + from * floats, floats, kv_storage_.begin() + to * floats);
  return absl::OkStatus();
}

absl::Status CpuBackend::ExportSlot(int64_t slot, std::string* bytes) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const char* first = reinterpret_cast<const char*>(&states_[slot * floats_per_slot_]);
  bytes->assign(first, floats_per_slot_ * sizeof(float));
  return absl::OkStatus();
}

absl::Status CpuBackend::ImportSlot(int64_t slot, std::string_view bytes, int64_t position) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RETURN_IF_ERROR(CheckImport("a state", bytes, floats_per_slot_ * sizeof(float)));
  std::memcpy(&states_[slot * floats_per_slot_], bytes.data(), bytes.size());
  positions_[slot] = position;
  return absl::OkStatus();
}

absl::Status CpuBackend::ExportKvBlock(int32_t block, std::string* bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  const int64_t floats = decoder_->kv_layout().floats_per_block();
  bytes->assign(reinterpret_cast<const char*>(&kv_storage_[block * floats]),
                floats * sizeof(float));
  return absl::OkStatus();
}

absl::Status CpuBackend::ImportKvBlock(int32_t block, std::string_view bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  const int64_t floats = decoder_->kv_layout().floats_per_block();
  RETURN_IF_ERROR(CheckImport("a KV block", bytes, floats * sizeof(float)));
  std::memcpy(&kv_storage_[block * floats], bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status CpuBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                 std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  std::vector<CpuSequence> sequences;
  sequences.reserve(chunks.size());
  for (const SlotChunk& c : chunks) {
    sequences.push_back(
        {.state = floats_per_slot_ > 0 ? &states_[c.slot * floats_per_slot_] : nullptr,
         .position = positions_[c.slot],
         .kv_blocks = c.kv_blocks,
         .tokens = c.tokens,
         .solver = c.solver,
         .stats = c.stats,
         .phase = c.phase});
  }
  RETURN_IF_ERROR(decoder_->Forward(sequences, kv_storage_.data(), which, logits));
  for (const SlotChunk& c : chunks) positions_[c.slot] += static_cast<int64_t>(c.tokens.size());
  return absl::OkStatus();
}

}  // namespace ridge
