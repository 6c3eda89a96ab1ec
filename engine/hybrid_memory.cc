#include "engine/hybrid_memory.h"

#include "base/check.h"

namespace ridge {

StateSlotPool::StateSlotPool(int64_t slots) : total_(slots) {
  free_.reserve(slots);
  for (int64_t i = slots - 1; i >= 0; --i) free_.push_back(i);  // hand out slot 0 first
}

int64_t StateSlotPool::Take() {
  if (free_.empty()) return -1;
  const int64_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void StateSlotPool::Release(int64_t slot) {
  RIDGE_CHECK(slot >= 0 && slot < total_ && free() < total_);
  free_.push_back(slot);
}

HybridMemory::HybridMemory(int64_t slots, const KvLayout& layout, int64_t blocks)
    : layout_(layout), slots_(slots), blocks_(layout.empty() ? 0 : blocks) {}

bool HybridMemory::TakeSlot(SequenceMemory& memory) {
  RIDGE_CHECK(memory.slot < 0);
  memory.slot = slots_.Take();
  return memory.slot >= 0;
}

bool HybridMemory::Grow(SequenceMemory& memory, int64_t end) {
  return memory.blocks.Grow(layout_, end, blocks_);
}

void HybridMemory::Release(SequenceMemory& memory) {
  if (memory.slot >= 0) slots_.Release(memory.slot);
  memory.slot = -1;
  memory.blocks.Clear(blocks_);
}

}  // namespace ridge
