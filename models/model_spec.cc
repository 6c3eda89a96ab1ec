#include "models/model_spec.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace ridge {

int64_t GkaSpec::expanded_heads() const { return std::max({q_heads, k_heads, v_heads}); }

HeadShape MixerHeads(const MixerSpec& mixer) {
  if (const auto* m = std::get_if<MesaSpec>(&mixer)) return {m->heads, m->head_dim};
  if (const auto* g = std::get_if<GkaSpec>(&mixer)) return {g->expanded_heads(), g->head_dim};
  const auto& a = std::get<AttentionSpec>(mixer);
  return {a.q_heads, a.head_dim};
}

HeadShape FirstLayerHeads(const ModelSpec& spec) {
  return spec.layers.empty() ? HeadShape{} : MixerHeads(spec.layers[0].mixer);
}

bool IsMesa(const MixerSpec& mixer) { return std::holds_alternative<MesaSpec>(mixer); }
bool IsGka(const MixerSpec& mixer) { return std::holds_alternative<GkaSpec>(mixer); }
bool IsAttention(const MixerSpec& mixer) { return std::holds_alternative<AttentionSpec>(mixer); }

const char* MixerKindName(const MixerSpec& mixer) {
  if (IsMesa(mixer)) return "mesa";
  if (IsGka(mixer)) return "gka";
  return "attention";
}

bool ModelSpec::IsEos(int64_t token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

std::string ModelSpec::LayerPattern() const {
  std::vector<std::string> symbols;
  for (const LayerSpec& layer : layers) {
    if (IsMesa(layer.mixer)) {
      symbols.push_back("MESA");
    } else if (IsGka(layer.mixer)) {
      symbols.push_back("GKA");
    } else {
      symbols.push_back(std::get<AttentionSpec>(layer.mixer).window > 0 ? "SWA" : "*");
    }
  }
  return absl::StrJoin(symbols, "-");
}

int64_t ModelSpec::CountLayers(bool (*is_kind)(const MixerSpec&)) const {
  return std::count_if(layers.begin(), layers.end(),
                       [&](const LayerSpec& l) { return is_kind(l.mixer); });
}

namespace {

int64_t MixerParameters(const MixerSpec& mixer, int64_t c) {
  if (const auto* m = std::get_if<MesaSpec>(&mixer)) {
    const int64_t k = m->heads * m->head_dim;
    const int64_t projections = (m->use_output_gate ? 4 : 3) * k * c + 2 * m->heads * c;
    return projections + 2 * m->heads + k + 2 * k * m->conv_size + m->head_dim + c * k;
  }
  if (const auto* g = std::get_if<GkaSpec>(&mixer)) {
    const int64_t d = g->head_dim, hx = g->expanded_heads();
    const int64_t qkv = (g->q_heads + g->k_heads + g->v_heads) * d;
    return qkv * c + 3 * hx * c + 4 * hx + qkv * g->conv_size + hx * d * c + d + c * hx * d;
  }
  const auto& a = std::get<AttentionSpec>(mixer);
  const int64_t d = a.head_dim;
  return (2 * a.q_heads + 2 * a.kv_heads) * d * c + 2 * d;
}

}  // namespace

int64_t ModelSpec::ParameterCount() const {
  const int64_t c = hidden_size;
  int64_t total = vocab_size * c * (tie_word_embeddings ? 1 : 2) + c;
  for (const LayerSpec& layer : layers) {
    total += MixerParameters(layer.mixer, c) + 3 * c * layer.intermediate_size + 2 * c;
  }
  return total;
}

int32_t DefaultSolverIterations(const ModelSpec& spec) {
  for (const LayerSpec& layer : spec.layers) {
    if (const auto* m = std::get_if<MesaSpec>(&layer.mixer)) return m->default_iterations;
    if (const auto* g = std::get_if<GkaSpec>(&layer.mixer)) return std::max(1, g->num_iter);
  }
  return 30;
}

const char* RecurrentLayerType(const ModelSpec& spec) {
  for (const LayerSpec& layer : spec.layers) {
    if (!IsAttention(layer.mixer)) return MixerKindName(layer.mixer);
  }
  return "";
}

int64_t RecurrentStateFloats(const MixerSpec& mixer) {
  if (const auto* m = std::get_if<MesaSpec>(&mixer)) {
    const int64_t k = m->heads * m->head_dim;
    return 2 * m->heads * m->head_dim * m->head_dim + 2 * (m->conv_size - 1) * k;
  }
  if (const auto* g = std::get_if<GkaSpec>(&mixer)) {
    const int64_t d = g->head_dim;
    const int64_t tails = (g->conv_size - 1) * (g->q_heads + g->k_heads + g->v_heads) * d;
    return 2 * g->expanded_heads() * d * d + tails;
  }
  const auto& a = std::get<AttentionSpec>(mixer);
  return 2 * a.window * a.kv_heads * a.head_dim;  // the window's keys and values (0 without)
}

RecurrentLayout PlanRecurrentLayout(const ModelSpec& spec) {
  RecurrentLayout layout;
  for (const LayerSpec& layer : spec.layers) {
    const int64_t floats = RecurrentStateFloats(layer.mixer);
    layout.layer_offset.push_back(floats > 0 ? layout.floats_per_slot : -1);
    layout.floats_per_slot += floats;
  }
  return layout;
}

KvLayout PlanKvLayout(const ModelSpec& spec, int64_t block_size) {
  KvLayout layout;
  layout.block_size = block_size;
  for (const LayerSpec& layer : spec.layers) {
    const auto* a = std::get_if<AttentionSpec>(&layer.mixer);
    if (a == nullptr || a->window > 0) {
      layout.layer_offset.push_back(-1);
      continue;
    }
    layout.layer_offset.push_back(layout.floats_per_token * block_size);
    layout.floats_per_token += 2 * a->kv_heads * a->head_dim;
  }
  return layout;
}

}  // namespace ridge
