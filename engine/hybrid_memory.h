// The engine's memory bookkeeping (the backend stores what it indexes): a pool of recurrent-state
// slots and a pool of KV blocks, composed, in the spirit of llama.cpp's llama_memory_hybrid. A
// sequence holds one slot and a block table; everything it holds goes back in one call.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_block_pool.h"
#include "models/model_spec.h"

namespace ridge {

class StateSlotPool {
 public:
  explicit StateSlotPool(int64_t slots);
  int64_t total() const { return total_; }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return total_ - free(); }
  // A free slot (the lowest first), or -1 when none is.
  int64_t Take();
  void Release(int64_t slot);

 private:
  int64_t total_;
  std::vector<int64_t> free_;  // taken from the back
};

// What one sequence holds.
struct SequenceMemory {
  int64_t slot = -1;
  BlockTable blocks;
};

class HybridMemory {
 public:
  HybridMemory(int64_t slots, const KvLayout& layout, int64_t blocks);

  const StateSlotPool& slots() const { return slots_; }
  const KvBlockPool& blocks() const { return blocks_; }
  const KvLayout& layout() const { return layout_; }
  // For a prefix cache, which holds slots and block references of its own in the same pools.
  StateSlotPool& mutable_slots() { return slots_; }
  KvBlockPool& mutable_blocks() { return blocks_; }

  // Takes a slot for `memory` (which holds none); false when none is free.
  bool TakeSlot(SequenceMemory& memory);
  // Blocks so positions < end are covered; false (nothing taken) when too few are free.
  bool Grow(SequenceMemory& memory, int64_t end);
  // Gives back the slot and every block.
  void Release(SequenceMemory& memory);

 private:
  KvLayout layout_;
  StateSlotPool slots_;
  KvBlockPool blocks_;
};

}  // namespace ridge
