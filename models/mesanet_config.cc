#include "models/mesanet_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/config_fields.h"

namespace ridge {
namespace {

absl::Status RejectUnsupported(const nlohmann::json& json, const ConfigFields& fields) {
  const auto type = json.find("model_type");
  if (type == json.end() || !type->is_string() || type->get<std::string>() != "mesa_net") {
    return fields.Error("model_type", "must be \"mesa_net\" for a MesaNet checkpoint");
  }
  if (fields.IsSet("attn")) {
    return fields.Error("attn",
                        "selects softmax-attention layers, which ridgeserve does not "
                        "support in MesaNet checkpoints yet");
  }
  if (fields.IsSet("attnres_block_size")) {
    return fields.Error(
        "attnres_block_size",
        "selects the experimental attention-residual variant, which is not supported");
  }
  if (fields.IsSet("hidden_act")) {
    const auto& act = json.at("hidden_act");
    if (!act.is_string() ||
        (act.get<std::string>() != "swish" && act.get<std::string>() != "silu")) {
      return fields.Error("hidden_act",
                          "must be \"swish\" (SiLU); other activations are not supported");
    }
  }
  if (fields.IsSet("conv_bias") && json.at("conv_bias").is_boolean() &&
      json.at("conv_bias").get<bool>()) {
    return fields.Error("conv_bias", "is true, but MesaNet's short convolutions have no bias");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MesaNetConfig::ParameterCount() const {
  const int64_t c = hidden_size, k = key_dim(), h = num_heads, i = intermediate_size;
  int64_t per_layer = 2 * c                                   // attn_norm, mlp_norm
                      + 3 * k * c + 2 * (h * c + h) + k       // q/k/v, a/b with bias, lambda
                      + 2 * k * conv_size + head_dim + c * k  // convs, o_norm, o_proj
                      + 3 * c * i;                            // MLP
  if (use_output_gate) per_layer += k * c;
  int64_t total = num_hidden_layers * per_layer + vocab_size * c + c;
  if (!tie_word_embeddings) total += vocab_size * c;
  return total;
}

int64_t MesaNetConfig::StateBytes() const {
  const int64_t per_layer = 2 * num_heads * head_dim * head_dim + 2 * (conv_size - 1) * key_dim();
  return num_hidden_layers * per_layer * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<MesaNetConfig> ParseMesaNetConfig(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("config.json: expected a JSON object");
  const ConfigFields fields(json, "");
  RETURN_IF_ERROR(RejectUnsupported(json, fields));
  MesaNetConfig config;
  RETURN_IF_ERROR(fields.Int("hidden_size", 1, 1 << 16, &config.hidden_size));
  RETURN_IF_ERROR(fields.Int("num_heads", 1, 1024, &config.num_heads));
  RETURN_IF_ERROR(fields.Int("head_dim", 1, 512, &config.head_dim));
  RETURN_IF_ERROR(fields.Int("num_hidden_layers", 1, 1024, &config.num_hidden_layers));
  RETURN_IF_ERROR(fields.Int("conv_size", 1, 64, &config.conv_size));
  RETURN_IF_ERROR(fields.Double("lambda_lower_bound", 1e-6, 1e6, &config.lambda_lower_bound));
  RETURN_IF_ERROR(fields.Double("norm_eps", 0.0, 1.0, &config.norm_eps));
  RETURN_IF_ERROR(fields.Int("vocab_size", 1, 1 << 24, &config.vocab_size));
  RETURN_IF_ERROR(fields.Int("max_cg_step_decoding", 1, 10000, &config.max_cg_step_decoding));
  // Checkpoints from before mid-2025 call the output gate `use_gate`.
  RETURN_IF_ERROR(fields.Bool("use_gate", &config.use_output_gate));
  RETURN_IF_ERROR(fields.Bool("use_output_gate", &config.use_output_gate));
  RETURN_IF_ERROR(fields.Bool("tie_word_embeddings", &config.tie_word_embeddings));
  RETURN_IF_ERROR(fields.TokenId("bos_token_id", config.vocab_size, &config.bos_token_id));
  RETURN_IF_ERROR(fields.TokenIds("eos_token_id", config.vocab_size, &config.eos_token_ids));

  double hidden_ratio = 4;
  RETURN_IF_ERROR(fields.Double("hidden_ratio", 1e-3, 1e3, &hidden_ratio));
  RETURN_IF_ERROR(fields.Int("intermediate_size", 1, 1 << 20, &config.intermediate_size));
  if (config.intermediate_size == 0) {
    // FLA's rule: int(C * ratio * 2/3), rounded up to a multiple of 256.
    const int64_t raw = static_cast<int64_t>(config.hidden_size * hidden_ratio * 2 / 3);
    config.intermediate_size = (raw + 255) / 256 * 256;
  }
  return config;
}

ModelSpec ToModelSpec(const MesaNetConfig& config) {
  ModelSpec spec;
  spec.architecture = "mesanet";
  spec.vocab_size = config.vocab_size;
  spec.hidden_size = config.hidden_size;
  spec.rms_norm_eps = config.norm_eps;
  spec.tie_word_embeddings = config.tie_word_embeddings;
  spec.bos_token_id = config.bos_token_id;
  spec.eos_token_ids = config.eos_token_ids;
  const MesaSpec mesa{.heads = config.num_heads,
                      .head_dim = config.head_dim,
                      .conv_size = config.conv_size,
                      .use_output_gate = config.use_output_gate,
                      .lambda_lower_bound = config.lambda_lower_bound,
                      .norm_eps = config.norm_eps,
                      .default_iterations = static_cast<int32_t>(config.max_cg_step_decoding)};
  spec.layers.assign(config.num_hidden_layers,
                     LayerSpec{.mixer = mesa, .intermediate_size = config.intermediate_size});
  return spec;
}

}  // namespace ridge
