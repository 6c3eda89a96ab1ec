#include "models/cuda/tensor_parallel_cuda_backend.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/cuda/device_collective.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_weights.h"
#include "models/thread_collectives.h"

namespace ridge {
namespace {

// What a rank's CudaHybridBackend points into: its weights and its collective (NCCL's group is
// shared by the ranks and goes with the last of them).
struct CudaRankParts {
  RankWeights weights;
  std::unique_ptr<HostStagedCollective> host_staged;
  std::shared_ptr<NcclGroup> nccl;
};

// NCCL's group for ranks on `devices`, or null with the reason in `*why` when the ranks go through
// host memory instead; an error when NCCL was asked for and cannot be had.
absl::StatusOr<std::shared_ptr<NcclGroup>> ChooseNccl(const TensorParallelCudaOptions& options,
                                                      const std::vector<int>& devices,
                                                      std::string* why) {
  using Collectives = TensorParallelCudaOptions::Collectives;
  if (options.collectives == Collectives::kHostStaged) {
    *why = "host memory";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Create(devices);
  if (group.ok()) {
    const int v = (*group)->nccl_version();
    *why = absl::StrCat("NCCL ", v / 10000, ".", v / 100 % 100, ".", v % 100);
    return std::shared_ptr<NcclGroup>(std::move(*group));
  }
  if (options.collectives == Collectives::kNccl) return group.status();
  *why = absl::StrCat("host memory (", group.status().message(), ")");
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorParallelCudaBackend>> TensorParallelCudaBackend::Create(
    const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCudaOptions& options) {
  if (options.devices.empty()) {
    return absl::InvalidArgumentError("tensor parallelism on GPUs needs a device");
  }
  ASSIGN_OR_RETURN(const std::vector<RankShard> plan, PlanTensorParallel(spec, options.ranks));
  auto group = std::make_unique<ThreadCollectives>(options.ranks, options.collective_timeout);
  const int32_t devices = static_cast<int32_t>(options.devices.size());
  std::vector<int> rank_devices;
  for (int32_t r = 0; r < options.ranks; ++r) rank_devices.push_back(options.devices[r % devices]);
  // Before the ranks' pools: NCCL's buffers count against the memory their planners see.
  std::string collectives;
  ASSIGN_OR_RETURN(const std::shared_ptr<NcclGroup> nccl,
                   ChooseNccl(options, rank_devices, &collectives));
  std::vector<Rank> ranks;
  int64_t weight_bytes = 0;
  CudaHybridOptions rank_options = options.backend;
  for (const RankShard& shard : plan) {
    auto parts = std::make_shared<CudaRankParts>();
    parts->weights = SliceRankWeights(spec, weights, shard);
    const int32_t r = shard.rank;
    DeviceCollective* collective = nullptr;
    if (nccl != nullptr) {
      parts->nccl = nccl;
      collective = &nccl->rank(r);
    } else {
      parts->host_staged = std::make_unique<HostStagedCollective>(&group->rank(r));
      collective = parts->host_staged.get();
    }
    const int32_t sharing = (options.ranks - 1 - r % devices) / devices + 1;  // ranks on this GPU
    const int32_t before = r / devices;  // ranks on this GPU before this one
    rank_options.device = rank_devices[r];
    rank_options.gpu_memory_utilization =
        options.backend.gpu_memory_utilization * (before + 1) / sharing;
    rank_options.rank = CudaHybridOptions::Rank{collective, shard.vocab};
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
    Rank rank;
    rank.owned = std::move(parts);
    rank.backend = std::move(*backend);
    if (nccl != nullptr) {
      // The others may wait in an NCCL collective this rank will not reach: end it.
      rank.on_failure = [group = nccl.get()](const absl::Status& why) { group->AbortAll(why); };
      rank.health = [group = nccl.get()] { return group->failure(); };
    }
    ranks.push_back(std::move(rank));
  }
  std::unique_ptr<TensorParallelCudaBackend> backend(
      new TensorParallelCudaBackend(spec, std::move(group), options.collective_timeout));
  RETURN_IF_ERROR(backend->SetRanks(std::move(ranks)));
  backend->weight_bytes_ = weight_bytes;
  backend->collectives_ = std::move(collectives);
  return backend;
}

int64_t TensorParallelCudaBackend::graph_replays() const {
  return static_cast<const CudaHybridBackend&>(rank_backend(0)).graph_replays();
}

}  // namespace ridge
