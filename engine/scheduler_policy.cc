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
  // Each prompt's piece leaves room for the first piece (at most an eighth of the budget) of
  // every prompt after it that may run this step, up to half the budget in all: one long prompt
  // cannot hold back the admission of the requests behind it, and short prompts still run
  // whole, first come first served.
  const int64_t first_piece = std::max<int64_t>(1, budget.prefill_tokens / 8);
  const int64_t max_reserve = budget.prefill_tokens / 2;
  const size_t admissible =
      std::min(waiting.size(), static_cast<size_t>(std::max<int64_t>(0, budget.free_slots)));
  std::vector<int64_t> waiting_after(admissible + 1, 0);  // first pieces of waiting[j+1 ..)
  for (size_t j = admissible; j-- > 0;) {
    waiting_after[j] =
        waiting_after[j + 1] +
        (j + 1 < admissible ? std::min(waiting[j + 1].prompt_tokens, first_piece) : 0);
  }
  const int64_t waiting_first_pieces =
      admissible == 0 ? 0 : waiting_after[0] + std::min(waiting[0].prompt_tokens, first_piece);
  std::vector<int64_t> running_after(running.size() + 1, 0);  // of running[i+1 ..) with prompts
  for (size_t i = running.size(); i-- > 0;) {
    const int64_t next = i + 1 < running.size() && !preempted[i + 1]
                             ? std::min(running[i + 1].prompt_tokens_left, first_piece)
                             : 0;
    running_after[i] = running_after[i + 1] + next;
  }
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
  // The tokens a prompt may take when `reserve` tokens are kept for the prompts after it.
  auto share = [&](int64_t left, int64_t reserve) {
    return std::min(left, std::max<int64_t>(1, tokens - std::min(reserve, max_reserve)));
  };
  for (size_t i = 0; i < running.size(); ++i) {
    const RunningSequenceInfo& seq = running[i];
    if (preempted[i] || seq.prompt_tokens_left == 0) continue;
    // The oldest prompt may take every free block; later ones leave one per decoder, or a
    // decoder crossing a block boundary would preempt them and lose their prefill.
    const int64_t reserve = plan.prefill.empty() ? 0 : decoders;
    const int64_t wanted = share(seq.prompt_tokens_left, running_after[i] + waiting_first_pieces);
    int64_t n = prompt_piece(wanted, seq.position, seq.table_blocks, reserve);
    // Out of blocks (not of budget): newer sequences make room for older prompts, so prompts
    // that each hold part of the pool can never wait on each other for ever.
    while (n == 0 && reserve == 0 && tokens > 0 && newest > i + 1) {
      preempt_newest();
      n = prompt_piece(wanted, seq.position, seq.table_blocks, reserve);
    }
    if (n == 0) break;  // first come, first served: later prompts wait too
    plan.prefill.emplace_back(seq.id, n);
  }

  if (!plan.preempt.empty()) return plan;
  int64_t free_slots = budget.free_slots;
  for (size_t j = 0; j < waiting.size(); ++j) {
    const WaitingRequestInfo& request = waiting[j];
    if (free_slots <= 0) break;
    const int64_t wanted = share(request.prompt_tokens, j < admissible ? waiting_after[j] : 0);
    if (!paged) {
      plan.admit.push_back(request.id);
      --free_slots;
      const int64_t n = prompt_piece(wanted, 0, 0, 0);
      if (n > 0) plan.prefill.emplace_back(request.id, n);
      continue;
    }
    const int64_t n = prompt_piece(wanted, request.position, request.table_blocks, decoders);
    if (n == 0) break;
    plan.admit.push_back(request.id);
    --free_slots;
    plan.prefill.emplace_back(request.id, n);
  }
  return plan;
}

}  // namespace ridge
