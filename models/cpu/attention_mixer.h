// Qwen3 softmax attention on the CPU over the paged KV cache (shared/specs/gka-hybrid-qwen3.md,
// section 5): q/k/v projections, per-head q/k RMSNorm, RoPE (rotate-half) at each token's
// position, the new keys and values written into the sequence's blocks, then causal GQA
// softmax attention (within the window for sliding-window layers) and o_proj.
#pragma once

#include <vector>

#include "kernels/weight_gemm.h"
#include "models/cpu/mixer.h"

namespace ridge {

struct AttentionLayerWeights {
  WeightMatrix q_proj, k_proj, v_proj;  // [Hq*D, C], [Hkv*D, C], [Hkv*D, C]
  WeightMatrix o_proj;                  // [C, Hq*D]
  std::vector<float> q_norm, k_norm;    // [D]
};

class AttentionMixer : public CpuMixer {
 public:
  // kv_offset: this layer's floats into a KV block (KvLayout::layer_offset).
  AttentionMixer(const AttentionSpec& spec, int64_t hidden_size, AttentionLayerWeights weights,
                 int64_t kv_offset);
  void Forward(const MixerBatch& batch, const float* normed, float* hidden) const override;

 private:
  AttentionSpec spec_;
  int64_t hidden_size_;
  AttentionLayerWeights w_;
  int64_t kv_offset_;
  std::vector<double> inv_freq_;
};

}  // namespace ridge
