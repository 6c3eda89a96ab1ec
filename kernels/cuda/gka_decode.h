// Gated KalmaNet's recurrence for one decode token per sequence on the GPU
// (shared/specs/gka-hybrid-qwen3.md, sections 3-4): per (sequence, expanded head) the decayed
// rank-1 updates of Hs and Ss in the sequence's state slot, ||Hs||_F and the adaptive ridge, the
// Chebyshev solve with the sequence's own tolerance and iteration cap (stopping before an update
// when ||A x - q|| <= tol ||q||), the alpha connection and the readout d^-0.5 Ss^T q~. It takes
// the token's L2-normalised q and k and its v per expanded head and the activated gates (the
// short convolutions, norms and gate activations run before it, o_norm and the output gate
// after), and follows kernels/gka_step.cc (the CPU's) step for step.
//
// One block of 2 * head_dim threads per (sequence, head): a thread keeps half a row of Hs in
// registers for the solve, so each iteration is one pass over registers and one barrier; Ss
// streams through once after the solve (a column a thread, so a warp's loads are one 128-byte
// line). Each state is read once and written once.
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/solve_counters.h"

namespace ridge::cuda {

struct GkaDecodeArgs {
  int32_t num_sequences = 0;
  int32_t heads = 0;     // expanded heads Hx
  int32_t head_dim = 0;  // 64 or 128
  // [num_sequences, heads, head_dim]: q and k L2-normalised, v as convolved (before beta).
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  // [num_sequences, heads]: sigmoid(b) + 1e-6, sigmoid(alpha_proj), -exp(A_log) softplus(a + dt).
  const float* beta = nullptr;
  const float* alpha = nullptr;
  const float* log_decay = nullptr;
  // [num_sequences]: the sequence's stopping rule (0: run max_iterations) and cap, its slot.
  const float* tolerance = nullptr;
  const int32_t* max_iterations = nullptr;
  const int32_t* slot = nullptr;
  // Slot s's layer state starts at state_pool + s * slot_floats + layer_offset: Hs [heads, D, D],
  // then Ss [heads, D, D] (row = key index), fp32.
  float* state_pool = nullptr;
  int64_t slot_floats = 0;
  int64_t layer_offset = 0;
  float ridge_strength = 0.02f;
  bool solve = true;                  // false when num_iter is 0: the readout uses q, no alpha
  float* out = nullptr;               // [num_sequences, heads, head_dim]
  SolveCounters* counters = nullptr;  // [num_sequences * heads], added to
};

// Whether the kernel takes this head size.
bool IsGkaDecodeHeadDim(int32_t head_dim);

cudaError_t LaunchGkaDecode(const GkaDecodeArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
