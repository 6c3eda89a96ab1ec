// What the engine reports for metrics. The Prometheus implementation lives beside the
// transports; tests can count calls. Called on the engine thread only.
#pragma once

#include <cstdint>

#include "engine/request.h"

namespace ridge {

struct StepReport {
  int64_t prefill_tokens = 0;     // prompt tokens processed this step
  int64_t prefill_sequences = 0;  // sequences with a prefill chunk this step
  int64_t decode_sequences = 0;   // sequences that decoded one token this step
  double seconds = 0.0;           // wall time of the step's model work
  SolverStats prefill_solver;     // solves of this step, by phase
  SolverStats decode_solver;
  int64_t running = 0;  // after the step: sequences holding a slot
  int64_t waiting = 0;  // after the step: queued, no slot yet
  int64_t slots_used = 0;
  int64_t slots_total = 0;
  // After the step (0 and 0 for models without attention layers); blocks only the prefix cache
  // holds count as free.
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t preemptions = 0;  // sequences preempted for KV blocks this step
  // The prefix cache: prompt tokens of this step's admissions, and those restored from it;
  // after the step, its snapshots and their state bytes; snapshots evicted this step.
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_snapshots = 0;
  int64_t prefix_snapshot_bytes = 0;
  int64_t prefix_evictions = 0;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(const StepReport& report) = 0;
  // Every finished request once, with its usage; inter-token gaps are reported as they occur.
  virtual void OnRequestFinished(FinishReason reason, const absl::Status& status,
                                 const RequestUsage& usage) = 0;
  virtual void OnInterTokenLatency(double seconds) = 0;
  virtual void OnRejected(const absl::Status& status) = 0;  // Submit refused it
};

}  // namespace ridge
