// The fused MesaNet token mixer on the GPU (spec: shared/specs/mesanet.md, section 2): one
// launch per layer advances every sequence of a step. One block per (sequence, head) runs,
// token after token: the short convolution continuing from the state's raw q/k tails, SiLU and
// the L2 norms, the gates, the rank-1 updates of Hs and Gs, CG with the sequence's own
// tolerance and iteration budget (early exit per head), the readout Gs^T x, the per-head output
// norm and the optional output gate. Hs stays in registers and Gs in shared memory for the
// whole block, so a step moves each state once in and once out however many tokens it has; Gs
// arrives during the first solve and Hs leaves during the last one.
//
// Plain C++ header: host code compiled without nvcc includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/solve_counters.h"

namespace ridge::cuda {

// Column of the decay gate a in a row of the in-projection's output (q | k | v | (g) | a | b,
// each of q, k, v, g heads * head_dim wide, a and b heads wide); b follows at + heads.
__host__ __device__ inline int32_t DecayGateColumn(int32_t heads, int32_t head_dim,
                                                   bool output_gate) {
  return (output_gate ? 4 : 3) * heads * head_dim;
}

// One entry per sequence of the step; device arrays.
struct SequenceTable {
  const int32_t* row_begin;       // first row of the sequence in the step's activations
  const int32_t* row_count;       // tokens of the sequence in this step; 0 = padding, skipped
  const int32_t* slot;            // state slot in the pool
  const float* tolerance;         // CG stopping rule ||r|| <= tol ||r0||; 0 runs max_iterations
  const int32_t* max_iterations;  // CG budget per solve
  const int32_t* jacobi_start;    // 1: x0 = q / (diag(Hs) + lambda) (decode); 0: x0 = 0 (prefill)
};

struct MesaLayerTensors {  // device pointers, fp32
  const float* q_conv;     // [K, W]
  const float* k_conv;     // [K, W]
  const float* lambda;     // [K]: softplus(lambda_params) + lambda_lower_bound
  const float* a_bias;     // [H]
  const float* b_bias;     // [H]
  const float* o_norm;     // [D]
};

struct MesaRecurrenceArgs {
  MesaLayerTensors weights;
  SequenceTable sequences;
  int32_t num_sequences;
  int32_t num_heads, head_dim, conv_size;
  bool output_gate;
  float norm_eps;
  // In-projection output fp32, rows proj_stride floats apart: q | k | v | (g) | a | b from column
  // 0 (DecayGateColumn), then padding columns that are never read.
  const float* proj;
  int32_t proj_stride;
  // Slot s, layer l starts at state_pool + s * slot_floats + l * layer_floats, laid out as
  // kernels/mesa_slot_layout.h says: packed Hs, Gs [H, D, D], q tail [W-1, K], k tail [W-1, K].
  float* state_pool;
  int64_t slot_floats;
  int64_t layer_floats;
  int32_t layer;
  void* out_bf16;           // [rows, K] bf16: normed (and gated) head outputs
  SolveCounters* counters;  // [num_sequences * H]
  int32_t sm_count;         // the device's multiprocessors: picks the block shape
};

// One block's record in the decode kernel's phase timeline (kernels/cuda/decode_timeline.h, a
// build option): clock64() at the end of each phase (of the sequence's last token, when it has
// several), then the block's SM and %globaltimer in ns at entry and exit.
enum DecodeTimelineField : int {
  kDecodePhaseEntry,        // kernel entry
  kDecodePhaseHsLoaded,     // Hs in registers
  kDecodePhaseInputs,       // short convolution, SiLU and norms of q and k
  kDecodePhaseSolveStart,   // Hs updated, Jacobi start and first residual
  kDecodePhaseIteration8,   // CG iteration 8 begun: iterations 0-7 carried Hs out and Gs in
  kDecodePhaseIteration16,  // CG iteration 16 begun: iterations 8-15 updated and stored Gs
  kDecodePhaseSolveEnd,     // CG done
  kDecodePhaseReadout,      // Gs^T x
  kDecodePhaseOutput,       // output norm, gate and store
  kDecodePhaseExit,         // conv tails stored
  kDecodeTimelineSm,
  kDecodeTimelineEntryNs,
  kDecodeTimelineExitNs,
  kDecodeTimelineFields
};

// Blocks of a launch the timeline records: the first this many.
inline constexpr int kDecodeTimelineBlocks = 4096;

// Copies the phase timeline of the last decode launch, kDecodeTimelineFields values a block for
// its first `blocks` (at most kDecodeTimelineBlocks) blocks, to host memory;
// cudaErrorNotSupported in a build without the RIDGE_DECODE_TIMELINE option.
cudaError_t CopyDecodeTimeline(int64_t* host, int blocks);

// Head dims 64 and 128 and conv sizes up to kMaxConvSize are supported (checked by the caller
// when the model is created: see MesaRecurrenceSupports).
inline constexpr int kMaxConvSize = 8;
bool MesaRecurrenceSupports(int head_dim, int conv_size);

cudaError_t LaunchMesaRecurrence(const MesaRecurrenceArgs& args, cudaStream_t stream);

}  // namespace ridge::cuda
