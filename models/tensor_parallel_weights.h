// A rank's share of a hybrid_qwen3 model's weights under a tensor-parallel plan
// (models/tensor_parallel.h), in the same HybridWeights a GPU backend uploads. Whole rows (q/k/v
// and the GKA gates' projections, gate/up, the embedding's and output layer's vocabulary rows)
// are views into the full model's tensors; columns (o_proj, down_proj) and the small vectors are
// copies the RankWeights own.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "models/hybrid_weights.h"
#include "models/model_spec.h"
#include "models/tensor_parallel.h"

namespace ridge {

struct RankWeights {
  // Layers as RankSpec(spec, shard) describes them; embedding and head hold shard.vocab's rows.
  HybridWeights weights;
  std::vector<std::unique_ptr<std::byte[]>> storage;  // the copied column slices
};

// `full` must be the weights of `spec`, `shard` one rank of PlanTensorParallel(spec, ...).
RankWeights SliceRankWeights(const ModelSpec& spec, const HybridWeights& full,
                             const RankShard& shard);

}  // namespace ridge
