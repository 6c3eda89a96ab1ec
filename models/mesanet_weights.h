// MesaNet parameters in float32 for the CPU backend, with the projections that read the same
// input fused into one matrix each so a layer runs three matrix products, not eight.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "models/checkpoint.h"
#include "models/mesanet_config.h"

namespace ridge {

struct MesaLayerWeights {
  std::vector<float> attn_norm;  // [C]
  // Rows: q [K], k [K], v [K], g [K] (only with the output gate), a [H], b [H]; columns C.
  std::vector<float> in_proj;
  std::vector<float> a_bias, b_bias;  // [H]
  std::vector<float> lambda;          // [K]: softplus(lambda_params) + lambda_lower_bound
  std::vector<float> q_conv, k_conv;  // [K, W]
  std::vector<float> o_norm;          // [D]
  std::vector<float> o_proj;          // [C, K]
  std::vector<float> mlp_norm;        // [C]
  std::vector<float> gate_up_proj;    // [2I, C]: gate rows, then up rows
  std::vector<float> down_proj;       // [C, I]
};

struct MesaNetWeights {
  std::vector<float> embeddings;  // [V, C]
  std::vector<MesaLayerWeights> layers;
  std::vector<float> final_norm;  // [C]
  std::vector<float> lm_head;     // [V, C]; empty when tied to the embeddings

  const std::vector<float>& output_matrix() const { return lm_head.empty() ? embeddings : lm_head; }
};

// Every expected tensor must be present with its exact shape; anything else is an error
// naming the tensor, except an lm_head.weight beside tied embeddings (ignored).
absl::StatusOr<MesaNetWeights> LoadMesaNetWeights(const Checkpoint& checkpoint,
                                                  const MesaNetConfig& config);

// Random parameters of the right shapes and realistic scales (for benchmarks and tests, like
// vLLM's dummy load format).
MesaNetWeights RandomMesaNetWeights(const MesaNetConfig& config, uint64_t seed);

}  // namespace ridge
