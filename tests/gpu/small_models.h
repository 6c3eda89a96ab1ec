// Small random models of the shapes the GPU tests run: a hybrid_qwen3 of a given layer pattern
// and head layout, and a MesaNet config.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/arch/hybrid_qwen3_config.h"
#include "models/mesanet_config.h"
#include "nlohmann/json.hpp"

namespace ridge::testing {

struct HybridShape {
  const char* pattern;  // hybrid_override_pattern, e.g. "GKA-*-GKA-SWA"
  int head_dim, q_heads, kv_heads;
  int window = 0;  // of the SWA layers
};

// Sizes beyond the shape's: the small tests' by default, hybrid-small-8l's in long-prompt tests.
struct Widths {
  int hidden = 256, intermediate = 384, vocab = 384;
  double rope_theta = 10000.0;
};

// Random weights (seed 5), KV blocks of 16 tokens; GKA heads as the attention heads.
inline absl::StatusOr<std::unique_ptr<HybridQwen3Model>> SmallHybridModel(const HybridShape& c,
                                                                          Widths w = {}) {
  const std::string pattern = c.pattern;
  nlohmann::json config = {
      {"model_type", "hybrid_qwen3"},
      {"hidden_size", w.hidden},
      {"intermediate_size", w.intermediate},
      {"num_hidden_layers", std::count(pattern.begin(), pattern.end(), '-') + 1},
      {"num_attention_heads", c.q_heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", 1e-6},
      {"vocab_size", w.vocab},
      {"tie_word_embeddings", false},
      {"max_position_embeddings", 131072},
      {"rope_theta", w.rope_theta},
      {"hybrid_override_pattern", c.pattern},
      {"gka_config",
       {{"head_dim", c.head_dim},
        {"num_q_heads", c.q_heads},
        {"num_k_heads", c.kv_heads},
        {"num_v_heads", c.kv_heads},
        {"num_iter", 30},
        {"ridge_strength", 0.02},
        {"use_alpha_connection", true},
        {"use_v_conv", true},
        {"use_beta_gate", true},
        {"use_gate", true},
        {"conv_size", 4},
        {"norm_eps", 1e-6},
        {"solver_type", "chebyshev"}}}};
  if (c.window > 0) config["sliding_window"] = c.window;
  auto spec = ParseHybridQwen3Config(config);
  if (!spec.ok()) return spec.status();
  return HybridQwen3Model::Random(*spec, 5, 16);
}

// Hidden 256, 4 heads of 64, 2 layers, FFN 512, vocabulary 300, no EOS.
inline MesaNetConfig SmallMesaNetConfig() {
  MesaNetConfig config;
  config.hidden_size = 256;
  config.num_heads = 4;
  config.head_dim = 64;
  config.num_hidden_layers = 2;
  config.intermediate_size = 512;
  config.vocab_size = 300;
  config.eos_token_ids.clear();
  return config;
}

}  // namespace ridge::testing
