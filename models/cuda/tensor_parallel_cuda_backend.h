// Tensor parallelism on GPUs (issue 33; models/tensor_parallel_backend.h): each rank a
// CudaHybridBackend (CudaHybridOptions::rank) of its RankSpec and SliceRankWeights on a GPU of its
// own or shared with other ranks, on a thread of this process. The ranks' collectives go through
// host memory (HostStagedCollective over ThreadCollectives) until an NCCL collective is built:
// the outputs are the split's, but every all-reduce waits for the GPU and copies through the
// host (two a layer), so a split runs slower than one GPU that holds the whole model; what it
// buys is a model (and its KV cache) spread over several GPUs' memory.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
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
  // How long a rank waits in a collective for the others before the step fails.
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

 private:
  using TensorParallelBackend::TensorParallelBackend;
  int64_t weight_bytes_ = 0;
};

}  // namespace ridge
