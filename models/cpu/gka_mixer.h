// Gated KalmaNet's token mixer on the CPU (shared/specs/gka-hybrid-qwen3.md, sections 3-4): the
// q/k/v/a/b/alpha/g projections, the short convolutions of q, k and v, per expanded head the
// decayed Gram updates of Hs and Ss with the Chebyshev solve under the request's budget, the
// alpha connection, the readout, o_norm, the output gate and o_proj. Prompts run token by token
// per head, exactly as decode does, so a prompt and its replay give the same state.
#pragma once

#include <vector>

#include "kernels/weight_gemm.h"
#include "models/cpu/mixer.h"

namespace ridge {

struct GkaLayerWeights {
  WeightMatrix q_proj, k_proj, v_proj;      // [Hq*D, C], [Hk*D, C], [Hv*D, C]
  WeightMatrix a_proj, b_proj, alpha_proj;  // [Hx, C]
  WeightMatrix g_proj;                      // [Hx*D, C]
  WeightMatrix o_proj;                      // [C, Hx*D]
  std::vector<float> b_bias, alpha_bias;    // [Hx]
  std::vector<float> decay_rate;            // [Hx]: exp(A_log)
  std::vector<float> dt_bias;               // [Hx]
  std::vector<float> conv;                  // [(Hq+Hk+Hv)*D, W]: q, k, then v channels
  std::vector<float> o_norm;                // [D]
};

class GkaMixer : public CpuMixer {
 public:
  // state_offset: this layer's floats in a state slot, laid out as Hs [Hx, D, D], Ss [Hx, D, D],
  // then the raw q/k/v projections of the last W-1 tokens [W-1, (Hq+Hk+Hv)*D], oldest first.
  GkaMixer(const GkaSpec& spec, int64_t hidden_size, GkaLayerWeights weights, int64_t state_offset);
  void Forward(const MixerBatch& batch, const float* normed, float* hidden) const override;

 private:
  struct Activations;
  void Convolution(const MixerBatch& batch, Activations& a) const;
  void Recurrence(const MixerBatch& batch, Activations& a) const;

  GkaSpec spec_;
  int64_t hidden_size_;
  GkaLayerWeights w_;
  int64_t state_offset_;
  int64_t qkv_width_;  // (Hq+Hk+Hv)*D
};

}  // namespace ridge
