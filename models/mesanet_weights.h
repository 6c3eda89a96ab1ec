// MesaNet parameters, two ways: as the CPU runner reads them (MesaNetView: the matrices where
// they lie, the mapped checkpoint in its own dtype or host fp32 weights; the small vectors in
// fp32), and as fp32 host arrays with the projections that read the same input fused into one
// matrix each (MesaNetWeights: what the CUDA backend uploads, and random weights).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/weight_gemm.h"
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

struct MesaLayerView {
  std::vector<float> attn_norm, a_bias, b_bias, lambda, q_conv, k_conv, o_norm, mlp_norm;
  // Rows q, k, v, (g), a, b in this order: one fused matrix, or one per projection.
  std::vector<WeightMatrix> in_proj = {};
  WeightMatrix o_proj = {};                // [C, K]
  std::vector<WeightMatrix> gate_up = {};  // gate rows, then up rows
  WeightMatrix down_proj = {};             // [C, I]
};

struct MesaNetView {
  WeightMatrix embeddings, output;  // [V, C]; output is the embeddings when tied
  std::vector<float> final_norm;
  std::vector<MesaLayerView> layers;
};

// Every expected tensor must be present with its exact shape; anything else is an error
// naming the tensor, except an lm_head.weight beside tied embeddings (ignored). The view points
// into `checkpoint`, which must outlive it.
absl::StatusOr<MesaNetView> LoadMesaNetView(const Checkpoint& checkpoint,
                                            const MesaNetConfig& config);
// A view of host weights, which must outlive it.
MesaNetView ViewOf(const MesaNetWeights& weights, const MesaNetConfig& config);
// fp32 host weights widened from a view (the CUDA backend uploads these).
MesaNetWeights WidenToHost(const MesaNetView& view);
// LoadMesaNetView, widened.
absl::StatusOr<MesaNetWeights> LoadMesaNetWeights(const Checkpoint& checkpoint,
                                                  const MesaNetConfig& config);

// Random parameters of the right shapes and realistic scales (for benchmarks and tests, like
// vLLM's dummy load format).
MesaNetWeights RandomMesaNetWeights(const MesaNetConfig& config, uint64_t seed);

}  // namespace ridge
