// The fields of a flash-linear-attention MesaNet config.json that define the model's math
// (spec: shared/specs/mesanet.md, section 1), validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model_spec.h"
#include "nlohmann/json.hpp"

namespace ridge {

struct MesaNetConfig {
  int64_t hidden_size = 2048;
  int64_t num_heads = 16;
  int64_t head_dim = 128;
  int64_t num_hidden_layers = 24;
  int64_t conv_size = 4;
  double lambda_lower_bound = 0.25;
  int64_t intermediate_size = 0;  // resolved from hidden_ratio when config.json has null
  double norm_eps = 1e-6;
  bool use_output_gate = false;
  bool tie_word_embeddings = false;
  int64_t vocab_size = 32000;
  int64_t bos_token_id = 1;                  // -1 when absent
  std::vector<int64_t> eos_token_ids = {2};  // generation stops on any
  int64_t max_cg_step_decoding = 30;

  int64_t key_dim() const { return num_heads * head_dim; }
  // Parameters of the model, counting tied embeddings once.
  int64_t ParameterCount() const;
  // Bytes of one sequence's state (fp32 Hs, Gs and conv tails for every layer).
  int64_t StateBytes() const;
};

absl::StatusOr<MesaNetConfig> ParseMesaNetConfig(const nlohmann::json& json);

// The same model as data: every layer a MesaSpec.
ModelSpec ToModelSpec(const MesaNetConfig& config);

}  // namespace ridge
