// Tensor parallelism on GPUs (issue 33; models/tensor_parallel_backend.h): each rank a
// CudaHybridBackend (CudaHybridOptions::rank) of its RankSpec and SliceRankWeights on a GPU of its
// own or shared with other ranks, on a thread of this process. The collectives are NCCL's
// (NcclGroup, loaded at run time) when every rank has a GPU of its own, in stream order and
// captured in the decode graphs; else they go through host memory (HostStagedCollective over
// ThreadCollectives): the split's outputs, but every all-reduce waits for the GPU and copies
// through the host, so that split runs slower than one GPU that holds the whole model.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/cuda/device_collective.h"
#include "models/cuda/hybrid_backend.h"
#include "models/hybrid_weights.h"
#include "models/tensor_parallel_backend.h"

namespace ridge {

struct TensorParallelCudaOptions {
  int32_t ranks = 2;
  // Rank r runs on devices[r % devices.size()]. Ranks that share a GPU split its memory: the k-th
  // of K ranks on a GPU plans with (k + 1) / K of backend.gpu_memory_utilization, counting what
  // the ranks before it took.
  std::vector<int> devices = {0};
  // Every rank's options (device and rank are set per rank). Rank 0 sizes the pools (num_slots,
  // num_kv_blocks 0: as many as fit); the other ranks take the same counts or fail.
  CudaHybridOptions backend;
  // kAuto: NCCL when every rank has a GPU of its own and NCCL loads, else through host memory.
  enum class Collectives { kAuto, kNccl, kHostStaged };
  Collectives collectives = Collectives::kAuto;
  // How long a rank waits in a host-staged collective for the others before the step fails, and
  // how long a step may run before the watchdog fails it: NCCL's collectives have no time-out of
  // their own, so the watchdog aborts the communicators (the group then reports itself unhealthy:
  // the server stops).
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(10);
};

class TensorParallelCudaBackend : public TensorParallelBackend {
 public:
  // `weights` (the full model's, of `spec`) must outlive the backend. An error names what does
  // not split over the ranks, or the rank that does not fit.
  static absl::StatusOr<std::unique_ptr<TensorParallelCudaBackend>> Create(
      const ModelSpec& spec, const HybridWeights& weights,
      const TensorParallelCudaOptions& options);

  int64_t weight_bytes() const { return weight_bytes_; }  // over every rank
  // How the ranks exchange partial sums, for the log ("NCCL 2.27.3", "host memory (why)").
  const std::string& collectives() const { return collectives_; }
  // Decode steps rank 0 replayed from CUDA graphs (NCCL's collectives are captured in them).
  int64_t graph_replays() const;

 private:
  using TensorParallelBackend::TensorParallelBackend;
  int64_t weight_bytes_ = 0;
  std::string collectives_;
};

}  // namespace ridge
