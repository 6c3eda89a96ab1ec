#include "models/cuda/tensor_parallel_cuda_backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/cuda/device_collective.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_weights.h"
#include "models/thread_collectives.h"

namespace ridge {
namespace {

// What a rank's CudaHybridBackend points into.
struct CudaRankParts {
  RankWeights weights;
  std::unique_ptr<HostStagedCollective> collective;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorParallelCudaBackend>> TensorParallelCudaBackend::Create(
    const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCudaOptions& options) {
  if (options.devices.empty()) {
    return absl::InvalidArgumentError("tensor parallelism on GPUs needs a device");
  }
  ASSIGN_OR_RETURN(const std::vector<RankShard> plan, PlanTensorParallel(spec, options.ranks));
  auto group = std::make_unique<ThreadCollectives>(options.ranks, options.collective_timeout);
  const int32_t devices = static_cast<int32_t>(options.devices.size());
  std::vector<Rank> ranks;
  int64_t weight_bytes = 0;
  CudaHybridOptions rank_options = options.backend;
  for (const RankShard& shard : plan) {
    auto parts = std::make_shared<CudaRankParts>();
    parts->weights = SliceRankWeights(spec, weights, shard);
    parts->collective = std::make_unique<HostStagedCollective>(&group->rank(shard.rank));
    const int32_t r = shard.rank;
    const int32_t sharing = (options.ranks - 1 - r % devices) / devices + 1;  // ranks on this GPU
    const int32_t before = r / devices;  // ranks on this GPU before this one
    rank_options.device = options.devices[r % devices];
    rank_options.gpu_memory_utilization =
        options.backend.gpu_memory_utilization * (before + 1) / sharing;
    rank_options.rank = CudaHybridOptions::Rank{parts->collective.get(), shard.vocab};
    absl::StatusOr<std::unique_ptr<CudaHybridBackend>> backend =
        CudaHybridBackend::Create(RankSpec(spec, shard), parts->weights.weights, rank_options);
    if (!backend.ok()) {
      return absl::Status(backend.status().code(),
                          absl::StrCat("rank ", r, " on CUDA device ", rank_options.device, ": ",
                                       backend.status().message()));
    }
    if (r == 0) {  // the others take rank 0's pools
      rank_options.num_slots = (*backend)->num_slots();
      rank_options.num_kv_blocks = (*backend)->num_kv_blocks();
    }
    weight_bytes += (*backend)->weight_bytes();
    ranks.push_back({.owned = std::move(parts), .backend = std::move(*backend)});
  }
  std::unique_ptr<TensorParallelCudaBackend> backend(
      new TensorParallelCudaBackend(spec, std::move(group)));
  RETURN_IF_ERROR(backend->SetRanks(std::move(ranks)));
  backend->weight_bytes_ = weight_bytes;
  return backend;
}

}  // namespace ridge
