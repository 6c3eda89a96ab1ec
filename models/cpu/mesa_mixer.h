// MesaNet's token mixer on the CPU (shared/specs/mesanet.md, section 2): the q/k/v/(g)/a/b
// projections into one buffer, the short convolutions, per head the decayed Gram updates with the
// CG solve, the output norm and gate, and o_proj.
#pragma once

#include "models/cpu/mixer.h"
#include "models/mesanet_weights.h"

namespace ridge {

class MesaMixer : public CpuMixer {
 public:
  // `weights` must outlive the mixer. state_offset: this layer's floats in a state slot, laid
  // out as Hs [H, D, D], Gs [H, D, D], q tail [W-1, K], k tail [W-1, K].
  MesaMixer(const MesaSpec& spec, int64_t hidden_size, const MesaLayerView* weights,
            int64_t state_offset);
  void Forward(const MixerBatch& batch, const float* normed, float* hidden) const override;

 private:
  struct Activations;
  void ShortConvolution(const MixerBatch& batch, Activations& a) const;
  void Recurrence(const MixerBatch& batch, Activations& a) const;

  MesaSpec spec_;
  int64_t hidden_size_;
  const MesaLayerView* w_;
  int64_t state_offset_;
};

}  // namespace ridge
