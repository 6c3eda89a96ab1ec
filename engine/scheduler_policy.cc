#include "engine/scheduler_policy.h"

#include <algorithm>

namespace ridge {

int64_t KvGeometry::BlocksToReach(int64_t table_blocks, int64_t end) const {
  if (block_size == 0 || end <= 0) return 0;
  return std::max<int64_t>(0, (end - 1) / block_size + 1 - table_blocks);
}

int64_t KvGeometry::TokensCovered(int64_t position, int64_t table_blocks, int64_t extra) const {
  return std::max<int64_t>(0, (table_blocks + extra) * block_size - position);
}

StepPlan PlanStep(std::span<const RunningSequenceInfo> running,
                  std::span<const WaitingRequestInfo> waiting, const StepBudget& budget,
                  const KvGeometry& kv) {
  StepPlan plan;
  const bool paged = kv.block_size > 0;
  int64_t free_blocks = budget.free_blocks;
  std::vector<bool> preempted(running.size(), false);
  std::vector<int64_t> reserved(running.size(), 0);  // blocks a planned decode token takes
  size_t newest = running.size();                    // running[newest - 1] is the next victim
  int64_t decoders = 0;
  auto preempt_newest = [&] {
    --newest;
    const RunningSequenceInfo& victim = running[newest];
    preempted[newest] = true;
    plan.preempt.push_back(victim.id);
    free_blocks += victim.table_blocks + reserved[newest];
    if (std::erase(plan.decode, victim.id) > 0) --decoders;
  };

  for (size_t i = 0; i < running.size(); ++i) {
    const RunningSequenceInfo& seq = running[i];
    if (preempted[i] || seq.prompt_tokens_left > 0) continue;
    const int64_t needed = kv.BlocksToReach(seq.table_blocks, seq.position + 1);
    while (needed > free_blocks && !preempted[i]) preempt_newest();
    if (preempted[i]) continue;
    free_blocks -= needed;
    reserved[i] = needed;
    plan.decode.push_back(seq.id);
    ++decoders;
  }

  int64_t tokens = budget.prefill_tokens;
  // The prompt piece of a sequence at `position` with `table_blocks` entries, within the token
  // budget and the free blocks beyond `reserve`; takes its blocks.
  auto prompt_piece = [&](int64_t left, int64_t position, int64_t table_blocks,
                          int64_t reserve) -> int64_t {
    int64_t n = std::min(left, tokens);
    if (paged) {
      const int64_t usable = std::max<int64_t>(0, free_blocks - reserve);
      n = std::min(n, kv.TokensCovered(position, table_blocks, usable));
    }
    if (n <= 0) return 0;
    free_blocks -= kv.BlocksToReach(table_blocks, position + n);
    tokens -= n;
    return n;
  };
  for (size_t i = 0; i < running.size(); ++i) {
    const RunningSequenceInfo& seq = running[i];
    if (preempted[i] || seq.prompt_tokens_left == 0) continue;
    // The oldest prompt may take every free block; later ones leave one per decoder, or a
    // decoder crossing a block boundary would preempt them and lose their prefill.
    const int64_t reserve = plan.prefill.empty() ? 0 : decoders;
    int64_t n = prompt_piece(seq.prompt_tokens_left, seq.position, seq.table_blocks, reserve);
    // Out of blocks (not of budget): newer sequences make room for older prompts, so prompts
    // that each hold part of the pool can never wait on each other for ever.
    while (n == 0 && reserve == 0 && tokens > 0 && newest > i + 1) {
      preempt_newest();
      n = prompt_piece(seq.prompt_tokens_left, seq.position, seq.table_blocks, reserve);
    }
    if (n == 0) break;  // first come, first served: later prompts wait too
    plan.prefill.emplace_back(seq.id, n);
  }

  if (!plan.preempt.empty()) return plan;
  int64_t free_slots = budget.free_slots;
  for (const WaitingRequestInfo& request : waiting) {
    if (free_slots <= 0) break;
    if (!paged) {
      plan.admit.push_back(request.id);
      --free_slots;
      const int64_t n = prompt_piece(request.prompt_tokens, 0, 0, 0);
      if (n > 0) plan.prefill.emplace_back(request.id, n);
      continue;
    }
    const int64_t n = prompt_piece(request.prompt_tokens, 0, 0, decoders);
    if (n == 0) break;
    plan.admit.push_back(request.id);
    --free_slots;
    plan.prefill.emplace_back(request.id, n);
  }
  return plan;
}

}  // namespace ridge
