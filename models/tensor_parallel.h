// Tensor parallelism's split of a hybrid_qwen3 model over N ranks (issue 33; docs/DESIGN.md,
// "Tensor parallelism"). Each rank owns whole heads of every mixer: their rows of the q/k/v (and
// GKA's a/b/alpha/g) projections, their states or keys and values, and their columns of o_proj;
// a slice of every MLP's intermediate width (gate/up rows, down_proj columns); and a slice of the
// vocabulary (rows of the embedding and of the output layer). o_proj and down_proj then give
// partial sums of the residual stream that one all-reduce each adds up; the embedding's slices
// add up the same way (a rank contributes the rows of tokens in its slice, zeros elsewhere); the
// output layer's slices are concatenated.
//
// Heads split evenly: a layer's query heads (GKA: its expanded heads) must be a multiple of the
// ranks. Key/value heads (GKA: q, k or v heads fewer than the expanded ones) split evenly too,
// or, when there are fewer than ranks, each is replicated on ranks / heads ranks, as vLLM does.
// Intermediate widths and the vocabulary split as evenly as they go (the first ranks take one
// more). MesaNet layers are not split.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_spec.h"

namespace ridge {

// Indices [first, first + count) of heads, columns or vocabulary entries.
struct IndexRange {
  int64_t first = 0, count = 0;
  int64_t end() const { return first + count; }
  bool operator==(const IndexRange&) const = default;
};

struct GkaShard {
  IndexRange expanded;  // the expanded heads whose states the rank keeps
  IndexRange q, k, v;   // the q, k and v heads they read (possibly shared with other ranks)
};

struct AttentionShard {
  IndexRange q, kv;  // query heads; the key/value heads they read (possibly replicated)
};

struct LayerShard {
  std::variant<GkaShard, AttentionShard> mixer;
  IndexRange intermediate;  // the MLP's columns
};

struct RankShard {
  int32_t rank = 0;
  std::vector<LayerShard> layers;
  IndexRange vocab;  // embedding and output-layer rows
};

// Every rank's part of `spec`, or an error naming the layer and the heads that do not split over
// `ranks` (ranks >= 1).
absl::StatusOr<std::vector<RankShard>> PlanTensorParallel(const ModelSpec& spec, int32_t ranks);

// The model a rank runs: each layer with the rank's head counts and intermediate width (its
// states and KV entries are laid out by PlanRecurrentLayout / PlanKvLayout of this spec). Token
// ids stay global, so vocab_size is the model's; the rank's slice of it is shard.vocab.
ModelSpec RankSpec(const ModelSpec& spec, const RankShard& shard);

}  // namespace ridge
