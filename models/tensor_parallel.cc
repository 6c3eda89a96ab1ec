#include "models/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

// Rank r's part of n items split as evenly as they go: the first n % ranks ranks take one more.
IndexRange EvenSlice(int64_t n, int32_t ranks, int32_t r) {
  const int64_t base = n / ranks, extra = n % ranks;
  return {r * base + std::min<int64_t>(r, extra), base + (r < extra ? 1 : 0)};
}

// The heads a rank's `owned` expanded (or query) heads read out of `heads` of one kind, when
// `total` expanded heads share them in groups of total / heads: its own even slice, or the one
// head its group replicates. `what` names them in errors.
absl::StatusOr<IndexRange> ReadHeads(int64_t heads, int64_t total, int32_t ranks,
                                     const IndexRange& owned, const std::string& what) {
  if (heads <= 0 || total % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", heads, " heads do not group ", total, " heads"));
  }
  if (heads % ranks == 0) {
    const int64_t per_rank = heads / ranks;
    return IndexRange{owned.first / (total / heads), per_rank};
  }
  if (ranks % heads == 0) return IndexRange{owned.first / (total / heads), 1};
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", heads, " heads neither split over ",
                                                 ranks, " ranks nor replicate evenly on them"));
}

absl::StatusOr<IndexRange> OwnedHeads(int64_t heads, int32_t ranks, int32_t r,
                                      const std::string& what) {
  if (heads % ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", heads, " heads do not split evenly over ", ranks, " ranks"));
  }
  return IndexRange{r * (heads / ranks), heads / ranks};
}

}  // namespace

absl::StatusOr<std::vector<RankShard>> PlanTensorParallel(const ModelSpec& spec, int32_t ranks) {
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("ranks must be >= 1: ", ranks));
  if (spec.vocab_size < ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary of ", spec.vocab_size, " entries does not split over ", ranks, " ranks"));
  }
  std::vector<RankShard> plan(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    RankShard& shard = plan[r];
    shard.rank = r;
    shard.vocab = EvenSlice(spec.vocab_size, ranks, r);
    for (size_t l = 0; l < spec.layers.size(); ++l) {
      const LayerSpec& layer = spec.layers[l];
      const std::string name = absl::StrCat("layer ", l);
      if (layer.intermediate_size < ranks) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": an MLP of ", layer.intermediate_size,
                         " columns does not split over ", ranks, " ranks"));
      }
      LayerShard& out = shard.layers.emplace_back();
      out.intermediate = EvenSlice(layer.intermediate_size, ranks, r);
      if (const auto* g = std::get_if<GkaSpec>(&layer.mixer)) {
        const int64_t hx = g->expanded_heads();
        GkaShard gka;
        ASSIGN_OR_RETURN(gka.expanded, OwnedHeads(hx, ranks, r, name + " (GKA)"));
        ASSIGN_OR_RETURN(gka.q, ReadHeads(g->q_heads, hx, ranks, gka.expanded, name + " (GKA q)"));
        ASSIGN_OR_RETURN(gka.k, ReadHeads(g->k_heads, hx, ranks, gka.expanded, name + " (GKA k)"));
        ASSIGN_OR_RETURN(gka.v, ReadHeads(g->v_heads, hx, ranks, gka.expanded, name + " (GKA v)"));
        out.mixer = gka;
      } else if (const auto* a = std::get_if<AttentionSpec>(&layer.mixer)) {
        AttentionShard attention;
        ASSIGN_OR_RETURN(attention.q, OwnedHeads(a->q_heads, ranks, r, name + " (query)"));
        ASSIGN_OR_RETURN(attention.kv, ReadHeads(a->kv_heads, a->q_heads, ranks, attention.q,
                                                 name + " (key/value)"));
        out.mixer = attention;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " is a MesaNet layer: tensor parallelism takes hybrid_qwen3"));
      }
    }
  }
  return plan;
}

ModelSpec RankSpec(const ModelSpec& spec, const RankShard& shard) {
  ModelSpec out = spec;
  for (size_t l = 0; l < out.layers.size(); ++l) {
    LayerSpec& layer = out.layers[l];
    const LayerShard& part = shard.layers[l];
    layer.intermediate_size = part.intermediate.count;
    if (auto* g = std::get_if<GkaSpec>(&layer.mixer)) {
      const GkaShard& gka = std::get<GkaShard>(part.mixer);
      g->q_heads = gka.q.count;
      g->k_heads = gka.k.count;
      g->v_heads = gka.v.count;
    } else {
      auto& a = std::get<AttentionSpec>(layer.mixer);
      const AttentionShard& attention = std::get<AttentionShard>(part.mixer);
      a.q_heads = attention.q.count;
      a.kv_heads = attention.kv.count;
    }
  }
  return out;
}

}  // namespace ridge
