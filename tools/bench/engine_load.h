// A closed-loop load on the engine, in process (no HTTP): `concurrency` clients each submit a
// request (random prompt ids, greedy, a fixed number of new tokens), wait for it to finish and
// submit the next, until `requests` have finished. Separates what the engine and backend
// sustain from what the HTTP layer adds (tools/bench/load_generator.py drives the same load over
// HTTP).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_backend.h"

namespace ridge {

struct EngineLoadOptions {
  int64_t concurrency = 64;
  int64_t requests = 256;
  int64_t prompt_tokens = 128;
  int32_t new_tokens = 64;
  int64_t prefill_token_budget = 0;  // 0: the backend's preferred budget
  int32_t prompt_id_limit = 4096;    // prompt ids are drawn below this
};

struct EngineLoadResult {
  double seconds = 0;
  int64_t generated_tokens = 0, failed = 0;
  double mean_ttft_seconds = 0;
  double p50_ttft_seconds = 0, p99_ttft_seconds = 0;
  // Over the requests submitted after the first `concurrency`, which all arrive at once and
  // queue behind one another's prefill: the closed loop's steady state (0 when there are none).
  double steady_mean_ttft_seconds = 0;
  int64_t prefill_token_budget = 0;  // the one the engine ran with
};

// `backend` needs at least options.concurrency slots.
absl::StatusOr<EngineLoadResult> RunEngineLoad(ModelBackend* backend,
                                               const EngineLoadOptions& options);

// Runs the load and prints one line of its results.
absl::Status ReportEngineLoad(ModelBackend* backend, const EngineLoadOptions& options);

// The client counts of a --engine-load list: whole numbers from 1 to 4096.
absl::StatusOr<std::vector<int64_t>> EngineLoadClients(const std::vector<double>& list);

}  // namespace ridge
