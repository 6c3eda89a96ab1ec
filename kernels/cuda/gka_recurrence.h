// Gated KalmaNet's recurrence on the GPU (shared/specs/gka-hybrid-qwen3.md, sections 3-4), token
// by token for every sequence of a step: per (sequence, expanded head) and per token, the L2
// norms of q and k, the gates (beta, alpha, the decay), the decayed rank-1 updates of Hs and Ss in
// the sequence's state slot, ||Hs||_F and the adaptive ridge, the Chebyshev solve with the
// sequence's own tolerance and iteration cap (stopping before an update when
// ||A x - q|| <= tol ||q||), the alpha connection, the readout d^-0.5 Ss^T q~, o_norm and the
// output gate silu(g). It takes the short convolutions' output (kernels/cuda/causal_conv.h) and
// the raw gate projections, and follows kernels/gka_step.cc (the CPU's) step for step.
//
// One block of 2 * head_dim threads per (sequence, head): a thread keeps an 8 x head_dim/16 block
// of Hs in registers across all of the sequence's tokens, so each solve iteration is one pass
// over registers and one barrier, and Hs is read and written once per step. Ss is asked of L2
// when the block starts and streams through once per token after the solve, four columns a
// thread (a warp's loads are whole 128-byte lines), every load of the step's last token in
// flight at once.
//
// Sequences of a step with many tokens (prompt pieces) go instead through the chunked kernel
// (gka_chunked_prefill.h), which solves a chunk's tokens together; LaunchGkaRecurrence launches
// both when a step has both kinds.
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/solve_counters.h"

namespace ridge::cuda {

// The per-sequence part of a step: rows [row_begin, row_begin + row_count) of the activations
// are the sequence's tokens, in order.
struct GkaSequences {
  const int32_t* row_begin = nullptr;
  const int32_t* row_count = nullptr;
  const int32_t* slot = nullptr;
  const float* tolerance = nullptr;  // 0: run max_iterations
  const int32_t* max_iterations = nullptr;
};

struct GkaRecurrenceArgs {
  int32_t num_sequences = 0;
  int32_t q_heads = 0, k_heads = 0, v_heads = 0;
  int32_t heads = 0;  // expanded heads Hx (a multiple of each of the above)
  // The most tokens any sequence has in the step (0: not known, every sequence token by token).
  // With head_dim 128, sequences of at least kChunkedFromTokens (gka_chunked_prefill.h) run in
  // chunks.
  int32_t max_tokens = 0;
  // The GPU's SMs: how many blocks the chunked kernel may give a head when few sequences have
  // prompt pieces (0: one block a head).
  int32_t sm_count = 0;
  int32_t head_dim = 0;  // 64 or 128
  // The chunked kernel's products with the chunk-start state on the tensor cores (3xTF32)
  // instead of the CUDA cores (gka_chunked_prefill.cu).
  bool tensor_core_products = false;
  GkaSequences sequences;
  // [rows, qkv_stride]: q [Hq*D], k [Hk*D], v [Hv*D] after the convolution and SiLU.
  const float* qkv = nullptr;
  int64_t qkv_stride = 0;
  // [rows, proj_stride]: the raw projections a [Hx], b [Hx], alpha [Hx] and g [Hx*D] at these
  // columns.
  const float* proj = nullptr;
  int64_t proj_stride = 0;
  int32_t a_column = 0, b_column = 0, alpha_column = 0, g_column = 0;
  // [Hx]: the gates' biases and exp(A_log); [D]: o_norm's weight.
  const float* b_bias = nullptr;
  const float* alpha_bias = nullptr;
  const float* decay_rate = nullptr;
  const float* dt_bias = nullptr;
  const float* o_norm = nullptr;
  float norm_eps = 1e-6f;
  // Slot s's layer state starts at state_pool + s * slot_floats + layer_offset, laid out as
  // kernels/gka_slot_layout.h says (Hs packed, then Ss), fp32.
  float* state_pool = nullptr;
  int64_t slot_floats = 0;
  int64_t layer_offset = 0;
  float ridge_strength = 0.02f;
  bool solve = true;         // false when num_iter is 0: the readout uses q, no alpha
  void* out_bf16 = nullptr;  // [rows, out_stride]: head h at columns [h*D, (h+1)*D)
  int64_t out_stride = 0;
  // Sequence s's head h adds its solves to counters[s * counters_stride + h] (a stride of at
  // least `heads`, so layers of different head counts share one array).
  SolveCounters* counters = nullptr;
  int32_t counters_stride = 0;
};

// Whether the kernel takes this head size.
bool IsGkaHeadDim(int32_t head_dim);

cudaError_t LaunchGkaRecurrence(const GkaRecurrenceArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
