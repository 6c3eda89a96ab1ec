// How a memory budget is split between recurrent-state slots and KV blocks: a pure function,
// so the CPU backend (host memory) and a GPU backend (device memory) plan the same way and
// tests can check it with tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ridge {

// Tokens of KV cache a slot gets when no size is asked for: twice a chat request's default
// max_tokens, so a single slot still takes a prompt with it.
inline constexpr int64_t kDefaultContextTokens = 8192;

// Block ids are int32 in block tables.
inline constexpr int64_t kMaxKvBlocks = (int64_t{1} << 31) - 1;

struct MemoryRequest {
  int64_t budget_bytes = 0;  // what the pools may take in all
  int64_t state_bytes_per_slot = 0;
  int64_t kv_bytes_per_block = 0;  // 0: the model has no attention layers
  int64_t kv_block_size = 0;       // tokens per block
  int64_t slots = 0;               // asked for (--slots)
  int64_t kv_blocks = 0;           // asked for (--kv-blocks or --kv-cache-memory); 0: the rest
                                   // of the budget, up to default_context tokens per slot
  int64_t default_context = kDefaultContextTokens;  // tokens a slot when no size is asked for
};

struct MemoryPlan {
  int64_t slots = 0;
  int64_t kv_blocks = 0;
  std::vector<std::string> warnings;  // each clamp, said in words
};

// Slots first (each needs its state and, with a KV cache, at least one block), then blocks.
// What does not fit in the budget is clamped, with a warning, never below one slot and (with a
// KV cache) one block.
MemoryPlan PlanMemory(const MemoryRequest& request);

}  // namespace ridge
