// Generation without a server: a fixed set of requests decoded together, one batched forward
// call per step, until each finishes. The CLI and the benchmarks use it; the server's
// scheduler adds admission and cancellation on top of the same model calls.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "kernels/solver_types.h"
#include "models/model.h"
#include "models/model_backend.h"
#include "sampling/sampling_params.h"

namespace ridge {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  SolverOptions solver;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids; a stop id or EOS that ended it is not included
  FinishReason finish_reason = FinishReason::kLength;
  SolverStats prefill_solver, decode_solver;
};

struct GenerationTimings {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;
  int64_t generated_tokens = 0;
};

// Validates every request before running any. Runs on `backend`, in its slots [0, n) for n
// requests (it needs that many; their contents are replaced), sampling on the host. timings
// may be null.
absl::StatusOr<std::vector<GenerationResult>> GenerateOffline(
    ModelBackend& backend, std::span<const GenerationRequest> requests, GenerationTimings* timings);

// The same on the CPU.
absl::StatusOr<std::vector<GenerationResult>> GenerateOffline(
    const Model& model, std::span<const GenerationRequest> requests, GenerationTimings* timings);

}  // namespace ridge
