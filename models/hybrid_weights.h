// A hybrid_qwen3 checkpoint's tensors as a GPU backend uploads them: views of the mapped
// safetensors (WeightMatrix, in the checkpoint's dtype) and fp32 copies of the small vectors, in
// the same per-layer structs the CPU mixers take. The architecture loader fills it beside the
// CPU decoder (models/arch/hybrid_qwen3.h); it stays valid as long as the model does.
#pragma once

#include <variant>
#include <vector>

#include "kernels/weight_gemm.h"
#include "models/cpu/attention_mixer.h"
#include "models/cpu/gka_mixer.h"

namespace ridge {

struct HybridLayerWeights {
  std::vector<float> input_norm, post_norm;  // [C]
  std::variant<GkaLayerWeights, AttentionLayerWeights> mixer;
  WeightMatrix gate, up;  // [I, C] each
  WeightMatrix down;      // [C, I]
};

struct HybridWeights {
  WeightMatrix embedding;  // [V, C]
  std::vector<HybridLayerWeights> layers;
  std::vector<float> final_norm;  // [C]
  WeightMatrix head;              // [V, C]: the embedding when tied
};

}  // namespace ridge
