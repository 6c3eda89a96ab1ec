// Rotary position embedding frequencies for the RoPE types Qwen3 checkpoints use ("default" and
// "yarn"), following transformers' definitions (shared/specs/gka-hybrid-qwen3.md, section 5).
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_spec.h"

namespace ridge {

// inv_freq[i] for i < head_dim / 2: the angle per position of dimension pair i.
std::vector<double> RopeInverseFrequencies(const RopeSpec& rope, int64_t head_dim);

// cos[i] and sin[i] (i < head_dim / 2) of `position`, scaled by rope.attention_factor.
void RopeAngles(const RopeSpec& rope, const std::vector<double>& inv_freq, int64_t position,
                float* cos, float* sin);

}  // namespace ridge
