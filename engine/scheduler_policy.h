// The batching policy as a pure function, so it can be tested with tables of simulated steps:
// given the sequences holding slots, the queue, the free slots and (for models with attention
// layers) the free KV blocks, decide who is preempted, who is admitted, who gets how many prompt
// tokens this step, and who decodes. Memory is taken in the plan: a step it plans never runs
// short of blocks.
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
  int64_t position = 0;            // tokens already in its memory
  int64_t table_blocks = 0;        // blocks it holds
};

struct WaitingRequestInfo {
  RequestId id = 0;
  int64_t prompt_tokens = 0;  // left to process once admitted
  // Where it starts when admitted (a prefix-cache hit: tokens already in its state) and the
  // blocks it then shares.
  int64_t position = 0;
  int64_t table_blocks = 0;
};

// How positions map to KV blocks; block_size 0 means the model has no KV cache.
struct KvGeometry {
  int64_t block_size = 0;

  // Blocks a sequence with `table_blocks` entries must add so positions < end are covered.
  int64_t BlocksToReach(int64_t table_blocks, int64_t end) const;
  // The most positions past `position` that `table_blocks + extra` entries cover.
  int64_t TokensCovered(int64_t position, int64_t table_blocks, int64_t extra) const;
};

struct StepBudget {
  int64_t free_slots = 0;
  int64_t free_blocks = 0;
  int64_t prefill_tokens = 512;  // prompt tokens per step, so decode is never stalled
};

struct StepPlan {
  // Running sequences to preempt before the step, newest first: they give back their slot and
  // blocks and return to the front of the queue (oldest first), to be recomputed from their
  // tokens when readmitted.
  std::vector<RequestId> preempt;
  std::vector<RequestId> admit;                        // in queue order; each takes a free slot
  std::vector<std::pair<RequestId, int64_t>> prefill;  // prompt tokens to process this step
  std::vector<RequestId> decode;                       // one token each
};

// Policy:
// 1. Every sequence whose prompt is done decodes every step (continuous batching), oldest
//    first; one that needs a new block when none is free preempts the most recently admitted
//    sequence (itself, if it is the newest) until the block is there.
// 2. Prompt tokens go out in admission order up to `prefill_tokens` per step, so a long prompt is
//    split over several steps; each piece only as far as free blocks reach. A prompt that gets
//    no block preempts the newest sequences after it until it does. Each piece leaves room for
//    the first piece (up to an eighth of the budget) of every prompt after it that may run this
//    step, up to half the budget: a long prompt never holds back the requests queued behind it.
// 3. The queue is admitted first-come first-served while slots are free (nothing is admitted in
//    a step that preempts); with a KV cache only when the first prompt piece gets blocks while
//    one block per decoding sequence stays free (so decoders rarely preempt).
// `running` is in admission order.
StepPlan PlanStep(std::span<const RunningSequenceInfo> running,
                  std::span<const WaitingRequestInfo> waiting, const StepBudget& budget,
                  const KvGeometry& kv);

}  // namespace ridge
