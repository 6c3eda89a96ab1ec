#include "models/arch/hybrid_qwen3_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "models/config_fields.h"

namespace ridge {
namespace {

enum class LayerKind { kAttention, kSlidingWindow, kGka };

// One pattern symbol; the HF Qwen3 names of layer_types are accepted beside the symbols.
absl::StatusOr<LayerKind> ParseSymbol(const ConfigFields& fields, const char* field,
                                      const std::string& symbol) {
  if (symbol == "*" || symbol == "full_attention") return LayerKind::kAttention;
  if (symbol == "SWA" || symbol == "sliding_attention") return LayerKind::kSlidingWindow;
  if (symbol == "GKA") return LayerKind::kGka;
  if (symbol == "GDN" || symbol == "M2" || symbol == "BMF" || symbol == "MESA") {
    return fields.Error(field, absl::StrCat("has layer '", symbol,
                                            "', a mixer this server does not run (supported: "
                                            "'*' attention, 'SWA' sliding window, 'GKA')"));
  }
  return fields.Error(field, absl::StrCat("has unknown layer symbol '", symbol,
                                          "' (expected '*', 'SWA' or 'GKA')"));
}

absl::StatusOr<std::vector<LayerKind>> ParsePattern(const nlohmann::json& json,
                                                    const ConfigFields& fields,
                                                    int64_t num_layers) {
  std::vector<LayerKind> from_pattern, from_types;
  if (fields.IsSet("hybrid_override_pattern")) {
    std::string pattern;
    RETURN_IF_ERROR(fields.String("hybrid_override_pattern", &pattern));
    const std::vector<std::string> symbols = absl::StrSplit(pattern, '-');
    for (const std::string& symbol : symbols) {
      ASSIGN_OR_RETURN(const LayerKind kind,
                       ParseSymbol(fields, "hybrid_override_pattern", symbol));
      from_pattern.push_back(kind);
    }
  }
  if (fields.IsSet("layer_types")) {
    const nlohmann::json& types = json.at("layer_types");
    if (!types.is_array()) return fields.Error("layer_types", "must be a list of layer symbols");
    for (const auto& entry : types) {
      if (!entry.is_string()) return fields.Error("layer_types", "must be a list of strings");
      ASSIGN_OR_RETURN(const LayerKind kind,
                       ParseSymbol(fields, "layer_types", entry.get<std::string>()));
      from_types.push_back(kind);
    }
  }
  if (from_pattern.empty() && from_types.empty()) {
    return fields.Error("hybrid_override_pattern",
                        "is missing (neither it nor layer_types says what each layer is)");
  }
  if (!from_pattern.empty() && !from_types.empty() && from_pattern != from_types) {
    return fields.Error("layer_types", "disagrees with hybrid_override_pattern");
  }
  std::vector<LayerKind> kinds = from_pattern.empty() ? from_types : from_pattern;
  if (static_cast<int64_t>(kinds.size()) != num_layers) {
    return fields.Error(
        from_pattern.empty() ? "layer_types" : "hybrid_override_pattern",
        absl::StrCat("lists ", kinds.size(), " layers, but num_hidden_layers is ", num_layers));
  }
  return kinds;
}

// rope_theta + rope_scaling (transformers 4.x) or rope_parameters (5.x).
absl::StatusOr<RopeSpec> ParseRope(const nlohmann::json& json, const ConfigFields& fields) {
  RopeSpec rope;
  rope.theta = 10000.0;  // transformers' default when a config names none
  RETURN_IF_ERROR(fields.Double("rope_theta", 1.001, 1e12, &rope.theta));
  const char* field = fields.IsSet("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!fields.IsSet(field)) return rope;
  const nlohmann::json& params = json.at(field);
  if (!params.is_object()) return fields.Error(field, "must be an object");
  const ConfigFields p(params, std::string(field) + ".");
  RETURN_IF_ERROR(p.Double("rope_theta", 1.001, 1e12, &rope.theta));
  std::string type = "default";
  RETURN_IF_ERROR(p.String("type", &type));
  RETURN_IF_ERROR(p.String("rope_type", &type));
  if (type == "default") return rope;
  if (type != "yarn") {
    return p.Error("rope_type", absl::StrCat("is '", type,
                                             "'; only 'default' and 'yarn' are "
                                             "supported"));
  }
  rope.type = RopeSpec::Type::kYarn;
  RETURN_IF_ERROR(p.Double("factor", 1.0, 1e4, &rope.factor));
  if (!p.IsSet("factor")) return p.Error("factor", "is required for yarn");
  if (p.IsSet("mscale") || p.IsSet("mscale_all_dim")) {
    return p.Error("mscale", "is set; yarn with mscale (DeepSeek's variant) is not supported");
  }
  rope.original_max_position = 0;
  RETURN_IF_ERROR(
      fields.Int("max_position_embeddings", 1, int64_t{1} << 30, &rope.original_max_position));
  RETURN_IF_ERROR(
      p.Int("original_max_position_embeddings", 1, int64_t{1} << 30, &rope.original_max_position));
  if (rope.original_max_position == 0) {
    return p.Error("original_max_position_embeddings", "is required for yarn");
  }
  RETURN_IF_ERROR(p.Double("beta_fast", 1e-3, 1e4, &rope.beta_fast));
  RETURN_IF_ERROR(p.Double("beta_slow", 1e-3, 1e4, &rope.beta_slow));
  if (rope.beta_fast <= rope.beta_slow) {
    return p.Error("beta_fast",
                   absl::StrCat("is ", rope.beta_fast, ", not above beta_slow ", rope.beta_slow));
  }
  RETURN_IF_ERROR(p.Bool("truncate", &rope.truncate));
  rope.attention_factor = 0.0;  // resolved from the factor below unless given
  RETURN_IF_ERROR(p.Double("attention_factor", 1e-6, 1e3, &rope.attention_factor));
  return rope;
}

// A boolean option the spec's math assumes: any other value is refused.
absl::Status RequireBool(const ConfigFields& gka, const char* field, bool required) {
  bool value = required;
  RETURN_IF_ERROR(gka.Bool(field, &value));
  if (value != required) {
    return gka.Error(field, absl::StrCat("is ", value ? "true" : "false", "; only ",
                                         required ? "true" : "false", " is supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GkaSpec> ParseGka(const nlohmann::json& json, const ConfigFields& fields,
                                 int64_t default_heads, int64_t default_head_dim) {
  nlohmann::json merged = nlohmann::json::object();
  for (const char* field : {"gka_config", "gka_overrides"}) {
    if (!fields.IsSet(field)) continue;
    if (!json.at(field).is_object()) return fields.Error(field, "must be an object");
    for (const auto& [key, value] : json.at(field).items()) merged[key] = value;
  }
  const ConfigFields gka(merged, "gka_config.");
  GkaSpec spec;
  spec.head_dim = default_head_dim;
  spec.q_heads = spec.k_heads = spec.v_heads = default_heads;
  RETURN_IF_ERROR(gka.Int("head_dim", 1, 512, &spec.head_dim));
  RETURN_IF_ERROR(gka.Int("num_q_heads", 1, 1024, &spec.q_heads));
  RETURN_IF_ERROR(gka.Int("num_k_heads", 1, 1024, &spec.k_heads));
  RETURN_IF_ERROR(gka.Int("num_v_heads", 1, 1024, &spec.v_heads));
  int64_t num_iter = spec.num_iter;
  RETURN_IF_ERROR(gka.Int("num_iter", 0, 1000, &num_iter));
  spec.num_iter = static_cast<int32_t>(num_iter);
  RETURN_IF_ERROR(gka.Double("ridge_strength", 1e-8, 1e4, &spec.ridge_strength));
  RETURN_IF_ERROR(gka.Int("conv_size", 1, 64, &spec.conv_size));
  RETURN_IF_ERROR(gka.Double("norm_eps", 1e-12, 1.0, &spec.norm_eps));
  int64_t chunk_size = 64;
  RETURN_IF_ERROR(gka.Int("chunk_size", 1, 1 << 16, &chunk_size));
  RETURN_IF_ERROR(RequireBool(gka, "use_alpha_connection", true));
  RETURN_IF_ERROR(RequireBool(gka, "use_v_conv", true));
  RETURN_IF_ERROR(RequireBool(gka, "use_beta_gate", true));
  RETURN_IF_ERROR(RequireBool(gka, "use_gate", true));
  RETURN_IF_ERROR(RequireBool(gka, "use_forgetting_gate", true));
  RETURN_IF_ERROR(RequireBool(gka, "use_forgetting_gate_kk", true));
  RETURN_IF_ERROR(RequireBool(gka, "gla_rescale", true));
  RETURN_IF_ERROR(RequireBool(gka, "kv_learnable_residual", false));
  if (gka.IsSet("kv_proj_rank")) {
    return gka.Error("kv_proj_rank", absl::StrCat("is ", merged["kv_proj_rank"].dump(),
                                                  "; low-rank k/v projections are not supported"));
  }
  int64_t sketches = 1;
  RETURN_IF_ERROR(gka.Int("num_sketches_per_head", 1, 1024, &sketches));
  if (sketches != 1) {
    return gka.Error("num_sketches_per_head",
                     absl::StrCat("is ", sketches, "; only 1 is supported"));
  }
  std::string solver = "chebyshev";
  RETURN_IF_ERROR(gka.String("solver_type", &solver));
  if (solver != "chebyshev") {
    return gka.Error("solver_type",
                     absl::StrCat("is '", solver, "'; only 'chebyshev' is supported"));
  }
  const int64_t hx = spec.expanded_heads();
  for (const auto& [name, heads] :
       {std::pair{"num_q_heads", spec.q_heads}, std::pair{"num_k_heads", spec.k_heads},
        std::pair{"num_v_heads", spec.v_heads}}) {
    if (hx % heads != 0) {
      return gka.Error(
          name, absl::StrCat("is ", heads, ", which does not divide the ", hx, " expanded heads"));
    }
  }
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ParseHybridQwen3Config(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("config.json: expected a JSON object");
  const ConfigFields fields(json, "");
  std::string model_type;
  RETURN_IF_ERROR(fields.String("model_type", &model_type));
  if (model_type != "hybrid_qwen3") {
    return fields.Error("model_type", "must be \"hybrid_qwen3\" for a Qwen3 hybrid checkpoint");
  }
  std::string act = "silu";
  RETURN_IF_ERROR(fields.String("hidden_act", &act));
  if (act != "silu" && act != "swish") {
    return fields.Error("hidden_act", absl::StrCat("is '", act, "'; only 'silu' is supported"));
  }
  bool attention_bias = false;
  RETURN_IF_ERROR(fields.Bool("attention_bias", &attention_bias));
  if (attention_bias) return fields.Error("attention_bias", "is true; Qwen3 has no q/k/v bias");

  ModelSpec spec;
  spec.architecture = "hybrid_qwen3";
  int64_t num_layers = 0, heads = 0, intermediate = 0;
  const int64_t big = int64_t{1} << 20;
  for (const char* required : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size", "vocab_size"}) {
    if (!fields.IsSet(required)) return fields.Error(required, "is missing");
  }
  RETURN_IF_ERROR(fields.Int("hidden_size", 1, 1 << 16, &spec.hidden_size));
  RETURN_IF_ERROR(fields.Int("num_hidden_layers", 1, 1024, &num_layers));
  RETURN_IF_ERROR(fields.Int("num_attention_heads", 1, 1024, &heads));
  RETURN_IF_ERROR(fields.Int("intermediate_size", 1, big, &intermediate));
  RETURN_IF_ERROR(fields.Int("vocab_size", 1, 1 << 24, &spec.vocab_size));
  int64_t kv_heads = heads, head_dim = 0;
  RETURN_IF_ERROR(fields.Int("num_key_value_heads", 1, 1024, &kv_heads));
  RETURN_IF_ERROR(fields.Int("head_dim", 1, 512, &head_dim));
  if (head_dim == 0) {  // transformers' default: the hidden size split over the heads
    if (spec.hidden_size % heads != 0 || spec.hidden_size / heads > 512) {
      return fields.Error("head_dim",
                          absl::StrCat("is missing, and hidden_size ", spec.hidden_size,
                                       " does not split into ", heads, " heads of at most 512"));
    }
    head_dim = spec.hidden_size / heads;
  }
  if (heads % kv_heads != 0) {
    return fields.Error(
        "num_key_value_heads",
        absl::StrCat("is ", kv_heads, ", which does not divide the ", heads, " attention heads"));
  }
  if (head_dim % 2 != 0) {
    return fields.Error("head_dim", absl::StrCat("is ", head_dim, "; RoPE needs an even one"));
  }
  RETURN_IF_ERROR(fields.Double("rms_norm_eps", 1e-12, 1.0, &spec.rms_norm_eps));
  RETURN_IF_ERROR(fields.Bool("tie_word_embeddings", &spec.tie_word_embeddings));
  RETURN_IF_ERROR(
      fields.Int("max_position_embeddings", 1, int64_t{1} << 30, &spec.max_position_embeddings));
  RETURN_IF_ERROR(fields.TokenId("bos_token_id", spec.vocab_size, &spec.bos_token_id));
  RETURN_IF_ERROR(fields.TokenIds("eos_token_id", spec.vocab_size, &spec.eos_token_ids));

  ASSIGN_OR_RETURN(const std::vector<LayerKind> kinds, ParsePattern(json, fields, num_layers));
  ASSIGN_OR_RETURN(RopeSpec rope, ParseRope(json, fields));
  if (rope.type == RopeSpec::Type::kYarn && rope.attention_factor == 0.0) {
    rope.attention_factor = 0.1 * std::log(rope.factor) + 1.0;  // transformers' get_mscale
  }
  if (rope.type == RopeSpec::Type::kYarn) {
    // The context yarn stretches the trained positions to (vLLM derives its max_model_len so).
    const auto stretched = static_cast<int64_t>(rope.factor * rope.original_max_position);
    spec.max_position_embeddings = std::max(spec.max_position_embeddings, stretched);
  }

  AttentionSpec attention{.q_heads = heads,
                          .kv_heads = kv_heads,
                          .head_dim = head_dim,
                          .qk_norm_eps = spec.rms_norm_eps,
                          .rope = rope,
                          .window = 0};
  int64_t window = 0;
  bool any_window = false, any_gka = false;
  for (LayerKind kind : kinds) {
    any_window |= kind == LayerKind::kSlidingWindow;
    any_gka |= kind == LayerKind::kGka;
  }
  if (any_window) {
    const char* field = "swa_config.window_size";
    if (fields.IsSet("swa_config")) {
      if (!json.at("swa_config").is_object())
        return fields.Error("swa_config", "must be an object");
      RETURN_IF_ERROR(ConfigFields(json.at("swa_config"), "swa_config.")
                          .Int("window_size", 1, int64_t{1} << 30, &window));
    } else {
      field = "sliding_window";
      RETURN_IF_ERROR(fields.Int("sliding_window", 1, int64_t{1} << 30, &window));
    }
    if (window == 0) return fields.Error(field, "is missing, but the pattern has SWA layers");
  }
  GkaSpec gka;
  if (any_gka) {
    ASSIGN_OR_RETURN(gka, ParseGka(json, fields, heads, head_dim));
  }

  for (LayerKind kind : kinds) {
    LayerSpec layer;
    layer.intermediate_size = intermediate;
    if (kind == LayerKind::kGka) {
      layer.mixer = gka;
    } else {
      AttentionSpec a = attention;
      // A window wider than the context is the context: the ring in the state slot needs no more.
      if (kind == LayerKind::kSlidingWindow) {
        a.window = spec.max_position_embeddings > 0 ? std::min(window, spec.max_position_embeddings)
                                                    : window;
      }
      layer.mixer = a;
    }
    spec.layers.push_back(layer);
  }
  return spec;
}

}  // namespace ridge
