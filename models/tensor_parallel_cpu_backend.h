// Tensor parallelism on the CPU (issue 33; models/tensor_parallel_backend.h): each rank a
// CpuBackend over a CpuDecoder of its RankSpec and SliceRankWeights, on a thread of this process,
// stepping in lock-step with the others through ThreadCollectives.
//
// It is not a way to speed up a CPU (the CPU backend's products and solves already use every
// core for a batch); it runs the same split, collectives and failure handling as a multi-GPU
// backend would, so that a tensor-parallel deployment's outputs can be checked anywhere.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/hybrid_weights.h"
#include "models/model_backend.h"
#include "models/tensor_parallel_backend.h"

namespace ridge {

class ThreadCollectives;

struct TensorParallelCpuOptions {
  int32_t ranks = 2;
  int64_t num_slots = 1;
  int64_t num_kv_blocks = 0;  // ignored without full-attention layers
  int64_t kv_block_size = 16;
  // How long a rank waits in a collective for the others before the step fails, and how long a
  // step may run before the watchdog fails it (a rank stuck in its own computation is not
  // interrupted: the step still waits for it).
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(10);
};

// The host memory one slot's state and one KV block take over all ranks (a replicated key/value
// head is stored on each rank that reads it).
struct TensorParallelFootprint {
  int64_t state_bytes_per_slot = 0;
  int64_t kv_bytes_per_block = 0;
};

class TensorParallelCpuBackend : public TensorParallelBackend {
 public:
  // `weights` (the full model's, of `spec`) must outlive the backend. An error names what does
  // not split over the ranks.
  static absl::StatusOr<std::unique_ptr<TensorParallelCpuBackend>> Create(
      const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCpuOptions& options);
  static absl::StatusOr<TensorParallelFootprint> Footprint(const ModelSpec& spec, int32_t ranks,
                                                           int64_t kv_block_size);

 private:
  using TensorParallelBackend::TensorParallelBackend;
};

}  // namespace ridge
