// The short causal convolution of MesaNet's and Gated KalmaNet's q/k(/v) projections on the CPU:
// depthwise, SiLU after, continuing each sequence from the raw inputs of its previous tokens.
#pragma once

#include <cstdint>

namespace ridge {

// out[t, c] = silu(sum_j weight[c, j] * raw[t - (width - 1) + j, c]) for t < n, c < channels,
// where raw rows before the first are the tail: the last width - 1 raw rows of the sequence
// so far, oldest first ([width - 1, channels]). Leaves the new tail (the last width - 1 raw rows
// of tail ++ x) in `tail`. x rows are x_stride floats apart, out rows out_stride; weight is
// [channels, width] (w[c, width - 1] multiplies the current token).
void CausalConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels,
                    const float* weight, int64_t width, float* tail, float* out,
                    int64_t out_stride);

}  // namespace ridge
