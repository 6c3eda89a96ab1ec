// What both GKA recurrence kernels (gka_recurrence.cu, token by token; gka_chunked_prefill.cu,
// a chunk at a time) read of one (sequence, expanded head): where its state lies in the slot,
// which q, k and v columns it takes, and its gates for a token (spec section 3). Device code,
// internal to those files.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/gka_recurrence.h"

namespace ridge::cuda::gka_internal {

// Below this ||Hs||_F the Chebyshev step would overflow: the head answers as Hs = 0 does
// (kernels/gka_step.cc).
inline constexpr float kSmallestFrobenius = 1e-30f;
// The spec's L2 norm adds this to the norm; sigmoid(b) + this scales k and v.
inline constexpr float kL2NormEps = 1e-6f;
inline constexpr float kBetaEps = 1e-6f;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// One token's gates: beta (scales k~ and v~), alpha (the readout's connection), the log of the
// state's decay.
struct GkaGates {
  float beta, alpha, log_decay;
};

template <int D>
struct GkaHead {
  float* hs;  // [D, D] in the slot; Ss [D, D] follows the layer's other heads' Hs
  float* ss;
  int q_column, k_column, v_column;  // in the convolved q | k | v rows
  float b_bias, alpha_bias, decay_rate, dt_bias;

  __device__ GkaHead(const GkaRecurrenceArgs& a, int seq, int head)
      : hs(a.state_pool + a.sequences.slot[seq] * a.slot_floats + a.layer_offset +
           static_cast<int64_t>(head) * D * D),
        ss(hs + static_cast<int64_t>(a.heads) * D * D),
        q_column((head / (a.heads / a.q_heads)) * D),
        k_column(a.q_heads * D + (head / (a.heads / a.k_heads)) * D),
        v_column((a.q_heads + a.k_heads) * D + (head / (a.heads / a.v_heads)) * D),
        b_bias(a.b_bias[head]),
        alpha_bias(a.alpha_bias[head]),
        decay_rate(a.decay_rate[head]),
        dt_bias(a.dt_bias[head]) {}

  // The gates of the token whose raw projections are `proj` (a row of a.proj).
  __device__ GkaGates Gates(const GkaRecurrenceArgs& a, const float* proj, int head) const {
    return {Sigmoid(proj[a.b_column + head] + b_bias) + kBetaEps,
            Sigmoid(proj[a.alpha_column + head] + alpha_bias),
            -decay_rate * Softplus(proj[a.a_column + head] + dt_bias)};
  }
};

}  // namespace ridge::cuda::gka_internal
