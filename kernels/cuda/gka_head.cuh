// What both GKA recurrence kernels (gka_recurrence.cu, token by token; gka_chunked_prefill.cu,
// a chunk at a time) read of one (sequence, expanded head): where its state lies in the slot,
// which q, k and v columns it takes, and its gates for a token (spec section 3). Device code,
// internal to those files.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/gka_recurrence.h"
#include "kernels/gka_slot_layout.h"

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
  float* hs;                         // packed (kernels/gka_slot_layout.h)
  float* ss;                         // [D, D]
  int q_column, k_column, v_column;  // in the convolved q | k | v rows
  float b_bias, alpha_bias, decay_rate, dt_bias;

  __device__ GkaHead(const GkaRecurrenceArgs& a, int seq, int head)
      : hs(a.state_pool + a.sequences.slot[seq] * a.slot_floats + a.layer_offset +
           GkaSlotHsOffset(D, head)),
        ss(a.state_pool + a.sequences.slot[seq] * a.slot_floats + a.layer_offset +
           GkaSlotSsOffset(a.heads, D, head)),
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

// Hs from its packed slot (kernels/packed_hs.h) into a whole row-major [D, D] (both triangles),
// e.g. in shared memory, by the block's kThreads threads; the caller synchronises the block
// before reading it.
template <int D, int kThreads>
__device__ void UnpackHs(const float* packed, float* whole) {
  constexpr int kGroups = D / 4;
  for (int e = threadIdx.x; e < D * kGroups; e += kThreads) {
    const int row = e / kGroups, group = e % kGroups;
    if (group < row / 4) continue;  // written as the mirror of the block across the diagonal
    const float4 v = *reinterpret_cast<const float4*>(packed + PackedHsOffset<int>(D, row, group));
    reinterpret_cast<float4*>(whole)[e] = v;
    if (group > row / 4) {
      whole[(4 * group) * D + row] = v.x;
      whole[(4 * group + 1) * D + row] = v.y;
      whole[(4 * group + 2) * D + row] = v.z;
      whole[(4 * group + 3) * D + row] = v.w;
    }
  }
}

// The upper block triangle of a whole row-major [D, D] Hs into its packed slot.
template <int D, int kThreads>
__device__ void PackHs(const float* whole, float* packed) {
  constexpr int kGroups = D / 4;
  for (int e = threadIdx.x; e < D * kGroups; e += kThreads) {
    const int row = e / kGroups, group = e % kGroups;
    if (group < row / 4) continue;
    *reinterpret_cast<float4*>(packed + PackedHsOffset<int>(D, row, group)) =
        reinterpret_cast<const float4*>(whole)[e];
  }
}

}  // namespace ridge::cuda::gka_internal
