#include "models/mesanet_weights.h"

#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "models/tensor_reader.h"

namespace ridge {
namespace {

absl::Status LoadLayer(TensorReader& reader, const MesaNetConfig& config, int index,
                       MesaLayerView* layer) {
  const std::string attn = absl::StrCat("model.layers.", index, ".attn.");
  const std::string prefix = absl::StrCat("model.layers.", index, ".");
  if (reader.Has(attn + "A_log") || reader.Has(attn + "dt_bias")) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", index,
                     " has A_log/dt_bias tensors: this checkpoint predates the current MesaNet "
                     "gate formula (sigmoid of a_proj) and is not supported"));
  }
  const int64_t c = config.hidden_size, k = config.key_dim(), h = config.num_heads;
  const int64_t w = config.conv_size, d = config.head_dim, i = config.intermediate_size;

  RETURN_IF_ERROR(reader.Read(prefix + "attn_norm.weight", {c}, &layer->attn_norm));
  std::vector<std::pair<const char*, int64_t>> projections = {
      {"q_proj", k}, {"k_proj", k}, {"v_proj", k}};
  if (config.use_output_gate) projections.push_back({"g_proj", k});
  projections.insert(projections.end(), {{"a_proj", h}, {"b_proj", h}});
  for (const auto& [name, rows] : projections) {
    ASSIGN_OR_RETURN(const WeightMatrix m, reader.Matrix(attn + name + ".weight", rows, c));
    layer->in_proj.push_back(m);
  }
  RETURN_IF_ERROR(reader.Read(attn + "a_proj.bias", {h}, &layer->a_bias));
  RETURN_IF_ERROR(reader.Read(attn + "b_proj.bias", {h}, &layer->b_bias));
  RETURN_IF_ERROR(reader.Read(attn + "lambda_params", {k}, &layer->lambda));
  for (float& v : layer->lambda) v = Softplus(v) + static_cast<float>(config.lambda_lower_bound);
  RETURN_IF_ERROR(reader.Read(attn + "q_conv1d.weight", {k, 1, w}, &layer->q_conv));
  RETURN_IF_ERROR(reader.Read(attn + "k_conv1d.weight", {k, 1, w}, &layer->k_conv));
  RETURN_IF_ERROR(reader.Read(attn + "o_norm.weight", {d}, &layer->o_norm));
  ASSIGN_OR_RETURN(layer->o_proj, reader.Matrix(attn + "o_proj.weight", c, k));
  RETURN_IF_ERROR(reader.Read(prefix + "mlp_norm.weight", {c}, &layer->mlp_norm));
  for (const char* name : {"mlp.gate_proj.weight", "mlp.up_proj.weight"}) {
    ASSIGN_OR_RETURN(const WeightMatrix m, reader.Matrix(prefix + name, i, c));
    layer->gate_up.push_back(m);
  }
  ASSIGN_OR_RETURN(layer->down_proj, reader.Matrix(prefix + "mlp.down_proj.weight", c, i));
  return absl::OkStatus();
}

// The rows of `parts`, one after another, as fp32.
std::vector<float> Widened(std::span<const WeightMatrix> parts) {
  std::vector<float> out;
  for (const WeightMatrix& m : parts) {
    const size_t offset = out.size();
    out.resize(offset + m.rows * m.cols);
    for (int64_t r = 0; r < m.rows; ++r) WeightRowToFloat(m, r, &out[offset + r * m.cols]);
  }
  return out;
}

}  // namespace

absl::StatusOr<MesaNetView> LoadMesaNetView(const Checkpoint& checkpoint,
                                            const MesaNetConfig& config) {
  TensorReader reader(checkpoint);
  MesaNetView view;
  const int64_t c = config.hidden_size, v = config.vocab_size;
  ASSIGN_OR_RETURN(view.embeddings, reader.Matrix("model.embeddings.weight", v, c));
  view.layers.resize(config.num_hidden_layers);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    RETURN_IF_ERROR(LoadLayer(reader, config, static_cast<int>(i), &view.layers[i]));
  }
  RETURN_IF_ERROR(reader.Read("model.norm.weight", {c}, &view.final_norm));
  if (config.tie_word_embeddings) {
    reader.Ignore("lm_head.weight");  // some exporters write the tied copy too
    view.output = view.embeddings;
  } else {
    ASSIGN_OR_RETURN(view.output, reader.Matrix("lm_head.weight", v, c));
  }
  RETURN_IF_ERROR(reader.RefuseUnused());
  return view;
}

MesaNetView ViewOf(const MesaNetWeights& w, const MesaNetConfig& config) {
  const int64_t c = config.hidden_size, v = config.vocab_size, k = config.key_dim();
  const int64_t i = config.intermediate_size;
  MesaNetView view;
  view.embeddings = WeightMatrix::Fp32(w.embeddings.data(), v, c);
  view.output = WeightMatrix::Fp32(w.output_matrix().data(), v, c);
  view.final_norm = w.final_norm;
  for (const MesaLayerWeights& l : w.layers) {
    MesaLayerView layer{.attn_norm = l.attn_norm,
                        .a_bias = l.a_bias,
                        .b_bias = l.b_bias,
                        .lambda = l.lambda,
                        .q_conv = l.q_conv,
                        .k_conv = l.k_conv,
                        .o_norm = l.o_norm,
                        .mlp_norm = l.mlp_norm};
    layer.in_proj = {
        WeightMatrix::Fp32(l.in_proj.data(), static_cast<int64_t>(l.in_proj.size()) / c, c)};
    layer.o_proj = WeightMatrix::Fp32(l.o_proj.data(), c, k);
    layer.gate_up = {WeightMatrix::Fp32(l.gate_up_proj.data(), 2 * i, c)};
    layer.down_proj = WeightMatrix::Fp32(l.down_proj.data(), c, i);
    view.layers.push_back(std::move(layer));
  }
  return view;
}

MesaNetWeights WidenToHost(const MesaNetView& view) {
  MesaNetWeights w;
  w.embeddings = Widened({&view.embeddings, 1});
  if (view.output.data != view.embeddings.data) w.lm_head = Widened({&view.output, 1});
  w.final_norm = view.final_norm;
  for (const MesaLayerView& l : view.layers) {
    w.layers.push_back({.attn_norm = l.attn_norm,
                        .in_proj = Widened(l.in_proj),
                        .a_bias = l.a_bias,
                        .b_bias = l.b_bias,
                        .lambda = l.lambda,
                        .q_conv = l.q_conv,
                        .k_conv = l.k_conv,
                        .o_norm = l.o_norm,
                        .o_proj = Widened({&l.o_proj, 1}),
                        .mlp_norm = l.mlp_norm,
                        .gate_up_proj = Widened(l.gate_up),
                        .down_proj = Widened({&l.down_proj, 1})});
  }
  return w;
}

absl::StatusOr<MesaNetWeights> LoadMesaNetWeights(const Checkpoint& checkpoint,
                                                  const MesaNetConfig& config) {
  ASSIGN_OR_RETURN(const MesaNetView view, LoadMesaNetView(checkpoint, config));
  return WidenToHost(view);
}

MesaNetWeights RandomMesaNetWeights(const MesaNetConfig& config, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto normal = [&](int64_t n, float stddev, float mean = 0.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  const int64_t c = config.hidden_size, k = config.key_dim(), h = config.num_heads;
  const int64_t i = config.intermediate_size, w = config.conv_size;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(c));
  MesaNetWeights weights;
  weights.embeddings = normal(config.vocab_size * c, 1.0f);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    MesaLayerWeights layer;
    layer.attn_norm = normal(c, 0.1f, 1.0f);
    const int64_t in_rows = (config.use_output_gate ? 4 : 3) * k + 2 * h;
    layer.in_proj = normal(in_rows * c, in_scale);
    layer.a_bias = normal(h, 1.0f, 2.0f);
    layer.b_bias = normal(h, 1.0f);
    layer.lambda = normal(k, 0.5f);
    for (float& v : layer.lambda) v = Softplus(v) + static_cast<float>(config.lambda_lower_bound);
    layer.q_conv = normal(k * w, 0.5f);
    layer.k_conv = normal(k * w, 0.5f);
    layer.o_norm = normal(config.head_dim, 0.1f, 1.0f);
    layer.o_proj = normal(c * k, 1.0f / std::sqrt(static_cast<float>(k)));
    layer.mlp_norm = normal(c, 0.1f, 1.0f);
    layer.gate_up_proj = normal(2 * i * c, in_scale);
    layer.down_proj = normal(c * i, 1.0f / std::sqrt(static_cast<float>(i)));
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = normal(c, 0.1f, 1.0f);
  if (!config.tie_word_embeddings) weights.lm_head = normal(config.vocab_size * c, in_scale);
  return weights;
}

}  // namespace ridge
