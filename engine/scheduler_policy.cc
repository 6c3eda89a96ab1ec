#include "engine/scheduler_policy.h"

#include <algorithm>

namespace ridge {

StepPlan PlanStep(std::span<const RunningSequenceInfo> running,
                  std::span<const WaitingRequestInfo> waiting, int64_t free_slots,
                  int64_t prefill_token_budget) {
  StepPlan plan;
  int64_t budget = prefill_token_budget;
  auto give_prompt_tokens = [&](RequestId id, int64_t left) {
    if (left <= 0 || budget <= 0) return;
    const int64_t n = std::min(left, budget);
    plan.prefill.emplace_back(id, n);
    budget -= n;
  };
  for (const RunningSequenceInfo& seq : running) {
    if (seq.prompt_tokens_left == 0) {
      plan.decode.push_back(seq.id);
    } else {
      give_prompt_tokens(seq.id, seq.prompt_tokens_left);
    }
  }
  for (const WaitingRequestInfo& request : waiting) {
    if (free_slots <= 0) break;
    plan.admit.push_back(request.id);
    --free_slots;
    give_prompt_tokens(request.id, request.prompt_tokens);
  }
  return plan;
}

}  // namespace ridge
