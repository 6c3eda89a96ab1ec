#include "models/tensor_parallel_weights.h"

#include <cstring>

#include "base/check.h"

namespace ridge {
namespace {

// Rows [first, first + count) of w: a view.
WeightMatrix Rows(const WeightMatrix& w, int64_t first, int64_t count) {
  RIDGE_CHECK(first >= 0 && first + count <= w.rows);
  WeightMatrix out = w;
  out.data = w.data + first * w.cols * static_cast<int64_t>(DTypeSize(w.dtype));
  out.rows = count;
  return out;
}

std::vector<float> Slice(const std::vector<float>& v, int64_t first, int64_t count) {
  RIDGE_CHECK(first >= 0 && first + count <= static_cast<int64_t>(v.size()));
  return {v.begin() + first, v.begin() + first + count};
}

class Slicer {
 public:
  explicit Slicer(RankWeights& out) : out_(out) {}

  // Columns [first, first + count) of every row of w: a copy the RankWeights own.
  WeightMatrix Columns(const WeightMatrix& w, int64_t first, int64_t count) {
    RIDGE_CHECK(first >= 0 && first + count <= w.cols);
    const size_t element = DTypeSize(w.dtype);
    auto& buffer = out_.storage.emplace_back(new std::byte[w.rows * count * element]);
    for (int64_t r = 0; r < w.rows; ++r) {
      std::memcpy(buffer.get() + r * count * element, w.data + (r * w.cols + first) * element,
                  count * element);
    }
    WeightMatrix slice = w;
    slice.data = buffer.get();
    slice.cols = count;
    return slice;
  }

  GkaLayerWeights Gka(const GkaSpec& g, const GkaLayerWeights& w, const GkaShard& s) {
    const int64_t d = g.head_dim, width = g.conv_size;
    GkaLayerWeights out;
    out.q_proj = Rows(w.q_proj, s.q.first * d, s.q.count * d);
    out.k_proj = Rows(w.k_proj, s.k.first * d, s.k.count * d);
    out.v_proj = Rows(w.v_proj, s.v.first * d, s.v.count * d);
    out.a_proj = Rows(w.a_proj, s.expanded.first, s.expanded.count);
    out.b_proj = Rows(w.b_proj, s.expanded.first, s.expanded.count);
    out.alpha_proj = Rows(w.alpha_proj, s.expanded.first, s.expanded.count);
    out.g_proj = Rows(w.g_proj, s.expanded.first * d, s.expanded.count * d);
    out.o_proj = Columns(w.o_proj, s.expanded.first * d, s.expanded.count * d);
    out.b_bias = Slice(w.b_bias, s.expanded.first, s.expanded.count);
    out.alpha_bias = Slice(w.alpha_bias, s.expanded.first, s.expanded.count);
    out.decay_rate = Slice(w.decay_rate, s.expanded.first, s.expanded.count);
    out.dt_bias = Slice(w.dt_bias, s.expanded.first, s.expanded.count);
    // The convolution's channels: q, then k, then v, each head_dim a head, conv_size taps each.
    int64_t channel = 0;
    for (const auto& [heads, part] :
         {std::pair{g.q_heads, s.q}, std::pair{g.k_heads, s.k}, std::pair{g.v_heads, s.v}}) {
      const auto first = w.conv.begin() + (channel + part.first * d) * width;
      out.conv.insert(out.conv.end(), first, first + part.count * d * width);
      channel += heads * d;
    }
    out.o_norm = w.o_norm;
    return out;
  }

  AttentionLayerWeights Attention(const AttentionSpec& a, const AttentionLayerWeights& w,
                                  const AttentionShard& s) {
    const int64_t d = a.head_dim;
    AttentionLayerWeights out;
    out.q_proj = Rows(w.q_proj, s.q.first * d, s.q.count * d);
    out.k_proj = Rows(w.k_proj, s.kv.first * d, s.kv.count * d);
    out.v_proj = Rows(w.v_proj, s.kv.first * d, s.kv.count * d);
    out.o_proj = Columns(w.o_proj, s.q.first * d, s.q.count * d);
    out.q_norm = w.q_norm;
    out.k_norm = w.k_norm;
    return out;
  }

 private:
  RankWeights& out_;
};

}  // namespace

RankWeights SliceRankWeights(const ModelSpec& spec, const HybridWeights& full,
                             const RankShard& shard) {
  RIDGE_CHECK(full.layers.size() == spec.layers.size() &&
              shard.layers.size() == spec.layers.size());
  RankWeights out;
  Slicer slicer(out);
  HybridWeights& w = out.weights;
  w.embedding = Rows(full.embedding, shard.vocab.first, shard.vocab.count);
  w.head = Rows(full.head, shard.vocab.first, shard.vocab.count);
  w.final_norm = full.final_norm;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const HybridLayerWeights& layer = full.layers[l];
    const LayerShard& part = shard.layers[l];
    HybridLayerWeights& mine = w.layers.emplace_back();
    mine.input_norm = layer.input_norm;
    mine.post_norm = layer.post_norm;
    mine.gate = Rows(layer.gate, part.intermediate.first, part.intermediate.count);
    mine.up = Rows(layer.up, part.intermediate.first, part.intermediate.count);
    mine.down = slicer.Columns(layer.down, part.intermediate.first, part.intermediate.count);
    if (const auto* g = std::get_if<GkaSpec>(&spec.layers[l].mixer)) {
      mine.mixer =
          slicer.Gka(*g, std::get<GkaLayerWeights>(layer.mixer), std::get<GkaShard>(part.mixer));
    } else {
      mine.mixer = slicer.Attention(std::get<AttentionSpec>(spec.layers[l].mixer),
                                    std::get<AttentionLayerWeights>(layer.mixer),
                                    std::get<AttentionShard>(part.mixer));
    }
  }
  return out;
}

}  // namespace ridge
