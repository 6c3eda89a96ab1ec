// Qwen3 softmax attention on the CPU (shared/specs/gka-hybrid-qwen3.md, section 5): q/k/v
// projections, per-head q/k RMSNorm, RoPE (rotate-half) at each token's position, then causal
// GQA softmax attention and o_proj. A full-attention layer keeps its keys and values in the
// sequence's KV blocks; a sliding-window layer keeps only its last `window` positions, in a ring
// in the sequence's state slot, so its memory never grows.
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
  // memory_offset: a full-attention layer's floats into a KV block (KvLayout::layer_offset); a
  // sliding-window layer's floats into the state slot (RecurrentLayout::layer_offset), where its
  // ring holds keys [window, Hkv*D] then values alike.
  AttentionMixer(const AttentionSpec& spec, int64_t hidden_size, AttentionLayerWeights weights,
                 int64_t memory_offset);
  void Forward(const MixerBatch& batch, const float* normed, float* hidden) const override;

 private:
  // q, k and v of every row ([rows, (Hq + 2 Hkv) * D]), normalised and rotated.
  std::vector<float> Project(const MixerBatch& batch, const float* normed) const;
  // Each sequence's new keys and values into its blocks, then its queries over the blocks.
  void AttendPaged(const MixerBatch& batch, std::vector<float>& proj, float* out) const;
  // Each sequence's window (the ring, then the step's own rows), its queries over it, then the
  // ring advanced past the step.
  void AttendWindow(const MixerBatch& batch, std::vector<float>& proj, float* out) const;

  AttentionSpec spec_;
  int64_t hidden_size_;
  AttentionLayerWeights w_;
  int64_t memory_offset_;
  std::vector<double> inv_freq_;
  int64_t q_width_, kv_width_, width_;  // Hq*D, Hkv*D, (Hq + 2 Hkv) * D
};

}  // namespace ridge
