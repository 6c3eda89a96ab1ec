// Rounds a model's matrices (embeddings, output layer, projections, MLP) to bf16 in place, as the
// GPU backend stores them, so a CPU reference runs the weights the GPU holds.
#pragma once

#include <vector>

#include "base/half.h"
#include "models/mesanet_weights.h"

namespace ridge::testing {

inline void RoundMatricesToBf16(MesaNetWeights& w) {
  auto round = [](std::vector<float>& v) {
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  };
  round(w.embeddings);
  round(w.lm_head);
  for (MesaLayerWeights& l : w.layers) {
    for (std::vector<float>* m : {&l.in_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) round(*m);
  }
}

}  // namespace ridge::testing
