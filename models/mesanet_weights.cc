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
                       MesaLayerWeights* layer) {
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
  layer->in_proj.clear();
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    RETURN_IF_ERROR(reader.Append(attn + proj + ".weight", {k, c}, &layer->in_proj));
  }
  if (config.use_output_gate) {
    RETURN_IF_ERROR(reader.Append(attn + "g_proj.weight", {k, c}, &layer->in_proj));
  }
  RETURN_IF_ERROR(reader.Append(attn + "a_proj.weight", {h, c}, &layer->in_proj));
  RETURN_IF_ERROR(reader.Append(attn + "b_proj.weight", {h, c}, &layer->in_proj));
  RETURN_IF_ERROR(reader.Read(attn + "a_proj.bias", {h}, &layer->a_bias));
  RETURN_IF_ERROR(reader.Read(attn + "b_proj.bias", {h}, &layer->b_bias));
  RETURN_IF_ERROR(reader.Read(attn + "lambda_params", {k}, &layer->lambda));
  for (float& v : layer->lambda) v = Softplus(v) + static_cast<float>(config.lambda_lower_bound);
  RETURN_IF_ERROR(reader.Read(attn + "q_conv1d.weight", {k, 1, w}, &layer->q_conv));
  RETURN_IF_ERROR(reader.Read(attn + "k_conv1d.weight", {k, 1, w}, &layer->k_conv));
  RETURN_IF_ERROR(reader.Read(attn + "o_norm.weight", {d}, &layer->o_norm));
  RETURN_IF_ERROR(reader.Read(attn + "o_proj.weight", {c, k}, &layer->o_proj));
  RETURN_IF_ERROR(reader.Read(prefix + "mlp_norm.weight", {c}, &layer->mlp_norm));
  layer->gate_up_proj.clear();
  RETURN_IF_ERROR(reader.Append(prefix + "mlp.gate_proj.weight", {i, c}, &layer->gate_up_proj));
  RETURN_IF_ERROR(reader.Append(prefix + "mlp.up_proj.weight", {i, c}, &layer->gate_up_proj));
  return reader.Read(prefix + "mlp.down_proj.weight", {c, i}, &layer->down_proj);
}

}  // namespace

absl::StatusOr<MesaNetWeights> LoadMesaNetWeights(const Checkpoint& checkpoint,
                                                  const MesaNetConfig& config) {
  TensorReader reader(checkpoint);
  MesaNetWeights weights;
  const int64_t c = config.hidden_size, v = config.vocab_size;
  RETURN_IF_ERROR(reader.Read("model.embeddings.weight", {v, c}, &weights.embeddings));
  weights.layers.resize(config.num_hidden_layers);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    RETURN_IF_ERROR(LoadLayer(reader, config, static_cast<int>(i), &weights.layers[i]));
  }
  RETURN_IF_ERROR(reader.Read("model.norm.weight", {c}, &weights.final_norm));
  if (config.tie_word_embeddings) {
    reader.Ignore("lm_head.weight");  // some exporters write the tied copy too
  } else {
    RETURN_IF_ERROR(reader.Read("lm_head.weight", {v, c}, &weights.lm_head));
  }
  RETURN_IF_ERROR(reader.RefuseUnused());
  return weights;
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
