#include "models/mesanet_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

absl::Status FieldError(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: field '", field, "' ", problem));
}

bool IsSet(const nlohmann::json& json, const char* field) {
  const auto it = json.find(field);
  return it != json.end() && !it->is_null();
}

absl::Status ReadInt(const nlohmann::json& json, const char* field, int64_t min, int64_t max,
                     int64_t* out) {
  if (!IsSet(json, field)) return absl::OkStatus();
  const auto& value = json.at(field);
  if (!value.is_number_integer()) return FieldError(field, "must be an integer");
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) {
    return FieldError(field, absl::StrCat("is ", v, ", expected ", min, " to ", max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadDouble(const nlohmann::json& json, const char* field, double min, double max,
                        double* out) {
  if (!IsSet(json, field)) return absl::OkStatus();
  const auto& value = json.at(field);
  if (!value.is_number()) return FieldError(field, "must be a number");
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    return FieldError(field, absl::StrCat("is ", v, ", expected ", min, " to ", max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadBool(const nlohmann::json& json, const char* field, bool* out) {
  if (!IsSet(json, field)) return absl::OkStatus();
  if (!json.at(field).is_boolean()) return FieldError(field, "must be true or false");
  *out = json.at(field).get<bool>();
  return absl::OkStatus();
}

// bos/eos ids may be null (absent), an integer, or (eos) a list whose first entry we use.
absl::Status ReadTokenId(const nlohmann::json& json, const char* field, int64_t vocab,
                         int64_t* out) {
  if (!json.contains(field)) return absl::OkStatus();
  const nlohmann::json* value = &json.at(field);
  if (value->is_null()) {
    *out = -1;
    return absl::OkStatus();
  }
  if (value->is_array() && !value->empty()) value = &value->at(0);
  if (!value->is_number_integer()) return FieldError(field, "must be an integer token id");
  const int64_t id = value->get<int64_t>();
  if (id < 0 || id >= vocab) {
    return FieldError(field, absl::StrCat("is ", id, ", outside the vocabulary of ", vocab));
  }
  *out = id;
  return absl::OkStatus();
}

absl::Status RejectUnsupported(const nlohmann::json& json) {
  const auto type = json.find("model_type");
  if (type == json.end() || !type->is_string() || type->get<std::string>() != "mesa_net") {
    return FieldError("model_type", "must be \"mesa_net\" for a MesaNet checkpoint");
  }
  if (IsSet(json, "attn")) {
    return FieldError("attn",
                      "selects softmax-attention layers, which ridgeserve does not "
                      "support in MesaNet checkpoints yet");
  }
  if (IsSet(json, "attnres_block_size")) {
    return FieldError(
        "attnres_block_size",
        "selects the experimental attention-residual variant, which is not supported");
  }
  if (IsSet(json, "hidden_act")) {
    const auto& act = json.at("hidden_act");
    if (!act.is_string() ||
        (act.get<std::string>() != "swish" && act.get<std::string>() != "silu")) {
      return FieldError("hidden_act",
                        "must be \"swish\" (SiLU); other activations are not supported");
    }
  }
  if (IsSet(json, "conv_bias") && json.at("conv_bias").is_boolean() &&
      json.at("conv_bias").get<bool>()) {
    return FieldError("conv_bias", "is true, but MesaNet's short convolutions have no bias");
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
  RETURN_IF_ERROR(RejectUnsupported(json));
  MesaNetConfig config;
  RETURN_IF_ERROR(ReadInt(json, "hidden_size", 1, 1 << 16, &config.hidden_size));
  RETURN_IF_ERROR(ReadInt(json, "num_heads", 1, 1024, &config.num_heads));
  RETURN_IF_ERROR(ReadInt(json, "head_dim", 1, 512, &config.head_dim));
  RETURN_IF_ERROR(ReadInt(json, "num_hidden_layers", 1, 1024, &config.num_hidden_layers));
  RETURN_IF_ERROR(ReadInt(json, "conv_size", 1, 64, &config.conv_size));
  RETURN_IF_ERROR(ReadDouble(json, "lambda_lower_bound", 1e-6, 1e6, &config.lambda_lower_bound));
  RETURN_IF_ERROR(ReadDouble(json, "norm_eps", 0.0, 1.0, &config.norm_eps));
  RETURN_IF_ERROR(ReadInt(json, "vocab_size", 1, 1 << 24, &config.vocab_size));
  RETURN_IF_ERROR(ReadInt(json, "max_cg_step_decoding", 1, 10000, &config.max_cg_step_decoding));
  // Checkpoints from before mid-2025 call the output gate `use_gate`.
  RETURN_IF_ERROR(ReadBool(json, "use_gate", &config.use_output_gate));
  RETURN_IF_ERROR(ReadBool(json, "use_output_gate", &config.use_output_gate));
  RETURN_IF_ERROR(ReadBool(json, "tie_word_embeddings", &config.tie_word_embeddings));
  RETURN_IF_ERROR(ReadTokenId(json, "bos_token_id", config.vocab_size, &config.bos_token_id));
  RETURN_IF_ERROR(ReadTokenId(json, "eos_token_id", config.vocab_size, &config.eos_token_id));

  double hidden_ratio = 4;
  RETURN_IF_ERROR(ReadDouble(json, "hidden_ratio", 1e-3, 1e3, &hidden_ratio));
  RETURN_IF_ERROR(ReadInt(json, "intermediate_size", 1, 1 << 20, &config.intermediate_size));
  if (config.intermediate_size == 0) {
    // FLA's rule: int(C * ratio * 2/3), rounded up to a multiple of 256.
    const int64_t raw = static_cast<int64_t>(config.hidden_size * hidden_ratio * 2 / 3);
    config.intermediate_size = (raw + 255) / 256 * 256;
  }
  return config;
}

}  // namespace ridge
