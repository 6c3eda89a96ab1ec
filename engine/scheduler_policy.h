// The batching policy as a pure function, so it can be tested with tables of simulated steps:
// given the sequences holding slots, the queue and the free slots, decide who is admitted, who
// gets how many prompt tokens this step, and who decodes.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace ridge {

struct RunningSequenceInfo {
  RequestId id = 0;
  int64_t prompt_tokens_left = 0;  // 0: the prompt is done, the sequence decodes
};

struct WaitingRequestInfo {
  RequestId id = 0;
  int64_t prompt_tokens = 0;
};

struct StepPlan {
  std::vector<RequestId> admit;                        // in queue order; each takes a free slot
  std::vector<std::pair<RequestId, int64_t>> prefill;  // prompt tokens to process this step
  std::vector<RequestId> decode;                       // one token each
};

// Policy: every sequence whose prompt is done decodes every step (continuous batching); the
// queue is admitted first-come first-served while slots are free; prompt tokens are handed out
// in admission order up to `prefill_token_budget` per step, so a long prompt is split over
// several steps and never stalls the decoding sequences for more than one budget's worth.
// `running` is in admission order.
StepPlan PlanStep(std::span<const RunningSequenceInfo> running,
                  std::span<const WaitingRequestInfo> waiting, int64_t free_slots,
                  int64_t prefill_token_budget);

}  // namespace ridge
