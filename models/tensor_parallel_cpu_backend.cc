#include "models/tensor_parallel_cpu_backend.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/cpu_backend.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_weights.h"
#include "models/thread_collectives.h"

namespace ridge {

namespace {

// What a rank's CpuBackend points into.
struct CpuRankParts {
  RankWeights weights;
  std::unique_ptr<CpuDecoder> decoder;
};

}  // namespace

// Every rank's share of a slot's state and of a KV block, added up.
absl::StatusOr<TensorParallelFootprint> TensorParallelCpuBackend::Footprint(const ModelSpec& spec,
                                                                            int32_t ranks,
                                                                            int64_t kv_block_size) {
  ASSIGN_OR_RETURN(const std::vector<RankShard> plan, PlanTensorParallel(spec, ranks));
  TensorParallelFootprint footprint;
  for (const RankShard& shard : plan) {
    const ModelSpec rank_spec = RankSpec(spec, shard);
    footprint.state_bytes_per_slot += PlanRecurrentLayout(rank_spec).bytes_per_slot();
    footprint.kv_bytes_per_block +=
        PlanKvLayout(rank_spec, kv_block_size).floats_per_block() * int64_t{sizeof(float)};
  }
  return footprint;
}

absl::StatusOr<std::unique_ptr<TensorParallelCpuBackend>> TensorParallelCpuBackend::Create(
    const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCpuOptions& options) {
  if (options.num_slots < 1 || options.num_kv_blocks < 0 || options.kv_block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: ", options.num_slots, " slots, ", options.num_kv_blocks,
                     " KV blocks of ", options.kv_block_size, " tokens"));
  }
  ASSIGN_OR_RETURN(const std::vector<RankShard> plan, PlanTensorParallel(spec, options.ranks));
  auto group = std::make_unique<ThreadCollectives>(options.ranks, options.collective_timeout);
  std::vector<Rank> ranks;
  for (const RankShard& shard : plan) {
    auto parts = std::make_shared<CpuRankParts>();
    parts->weights = SliceRankWeights(spec, weights, shard);
    ModelSpec rank_spec = RankSpec(spec, shard);
    DecoderWeights decoder_weights =
        HybridDecoderWeights(rank_spec, parts->weights.weights, options.kv_block_size);
    const DecoderRank part{.collective = &group->rank(shard.rank), .vocab = shard.vocab};
    parts->decoder = std::make_unique<CpuDecoder>(std::move(rank_spec), std::move(decoder_weights),
                                                  options.kv_block_size, part);
    auto backend = std::make_unique<CpuBackend>(parts->decoder.get(), options.num_slots,
                                                options.num_kv_blocks);
    // A rank's error aborts the thread collectives (the group's), which are never left broken.
    ranks.push_back({.owned = std::move(parts),
                     .backend = std::move(backend),
                     .on_failure = nullptr,
                     .health = nullptr});
  }
  std::unique_ptr<TensorParallelCpuBackend> backend(
      new TensorParallelCpuBackend(spec, std::move(group), options.collective_timeout));
  RETURN_IF_ERROR(backend->SetRanks(std::move(ranks)));
  return backend;
}

}  // namespace ridge
