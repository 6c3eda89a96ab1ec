#include "engine/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ridge {

MemoryPlan PlanMemory(const MemoryRequest& r) {
  MemoryPlan plan;
  const bool paged = r.kv_bytes_per_block > 0;
  const int64_t per_slot =
      std::max<int64_t>(1, r.state_bytes_per_slot) + (paged ? r.kv_bytes_per_block : 0);
  const int64_t fit_slots = std::max<int64_t>(1, r.budget_bytes / per_slot);
  plan.slots = std::max<int64_t>(1, r.slots);
  if (plan.slots > fit_slots) {
    plan.warnings.push_back(absl::StrCat("--slots ", plan.slots, ": only ", fit_slots, " fit in ",
                                         r.budget_bytes, " bytes (", per_slot,
                                         " bytes each with one KV block); using ", fit_slots));
    plan.slots = fit_slots;
  }
  if (!paged) return plan;
  const int64_t left = std::max<int64_t>(0, r.budget_bytes - plan.slots * r.state_bytes_per_slot);
  const int64_t fit_blocks = std::clamp<int64_t>(left / r.kv_bytes_per_block, 1, kMaxKvBlocks);
  if (r.kv_blocks > 0) {
    plan.kv_blocks = r.kv_blocks;
    if (plan.kv_blocks > fit_blocks) {
      plan.warnings.push_back(absl::StrCat("KV cache of ", plan.kv_blocks, " blocks: only ",
                                           fit_blocks, " fit beside ", plan.slots,
                                           " state slots; using ", fit_blocks));
      plan.kv_blocks = fit_blocks;
    }
    return plan;
  }
  const int64_t blocks_per_slot =
      (r.default_context + r.kv_block_size - 1) / std::max<int64_t>(1, r.kv_block_size);
  plan.kv_blocks = std::min({fit_blocks, plan.slots * blocks_per_slot, kMaxKvBlocks});
  return plan;
}

}  // namespace ridge
