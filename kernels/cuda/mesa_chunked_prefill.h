// Chunked MesaNet prefill on the GPU (spec: shared/specs/mesanet.md, section 5). Every prompt
// is cut into chunks of kPrefillChunk tokens and a layer's token mixer runs as five launches:
//
//  1. Prepare, per (chunk, head): short convolution (continuing from the slot's raw tails),
//     SiLU, L2 norms of q and k, log forget gate and input gate of every token.
//  2. Tails, per sequence: the new raw q/k tails into the slot.
//  3. Starting states, per (sequence, head, matrix): the slot's Hs (unpacked) and Gs as the
//     first chunk's start state, so that launch 4 never reads the slot it writes.
//  4. Chunk states, per (sequence, head, matrix, 32-row block): Hs and Gs at every chunk start
//     by the rank-1 recurrence (they do not depend on the solves), and the final state straight
//     into the slot.
//  5. Solve, per (chunk, head, slice of its tokens): the slice's tokens run CG together, each
//     product (Hs_t p_t for every t) as three matrix products on the tensor cores (3xTF32,
//     about fp32 accuracy), each token with its own stopping rule; then the readout
//     o_t = Gs_t^T x_t the same way, the per-head output norm and the optional gate. A slice is
//     the whole chunk unless the step's prompts are few or short (PickSolveRows).
//     A tolerance-0 solve's late iterations take one f16 pass (see single_pass_residual): a
//     slice converts its operands in place; a whole chunk, in a step with more of them than
//     SMs, hands its CG over (the handoff scratch) to a second kernel that runs them a warp per
//     16 tokens with no block barriers, and a third does its readout (Gs_c streamed in
//     slices, two blocks an SM).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/mesa_recurrence.h"

namespace ridge::cuda {

inline constexpr int kPrefillChunk = 64;

// Device arrays describing the prefill sequences of a step (indexed j) and their chunks (c).
struct PrefillTable {
  const int32_t* row_begin;       // [j] first row of sequence j in the step's activations
  const int32_t* row_count;       // [j]
  const int32_t* slot;            // [j]
  const float* tolerance;         // [j]
  const int32_t* max_iterations;  // [j]
  const int32_t* chunk_begin;     // [j] index of its first chunk
  const int32_t* chunk_sequence;  // [c] the sequence j of chunk c
  int32_t num_sequences;
  int32_t num_chunks;
};

struct MesaPrefillArgs {
  MesaLayerTensors weights;
  PrefillTable table;
  int32_t num_heads, head_dim, conv_size;
  bool output_gate;
  float norm_eps;
  const float* proj;  // rows proj_stride floats apart, laid out as MesaRecurrenceArgs::proj
  int32_t proj_stride;
  float* state_pool;  // slot layout as MesaRecurrenceArgs
  int64_t slot_floats;
  int64_t layer_floats;
  int32_t layer;
  // Scratch: normalised q and k [rows, K], log forget gate and input gate [rows, H] each, and
  // the chunk-start states [num_chunks, H, 2, D, D].
  float* q_norm;
  float* k_norm;
  float* log_gamma;
  float* beta;
  float* chunk_states;
  void* out_bf16;            // [rows, K]
  SolveCounters* counters;   // [num_sequences * H], indexed by j
  int32_t solve_rows;        // tokens per solve block: 16, 32 or 64 (PickSolveRows); 0: 64
  int32_t chunk_state_rows;  // rows per chunk-state block: 32 or 64 (PickChunkStateRows); 0: 32
  // A solve block of tolerance-0 sequences takes its products in one f16 pass once every one
  // of its tokens' residuals is at most this fraction of its start (0: always 3xTF32, and the
  // launch takes a kernel without that phase, whose 3xTF32 iterations are faster).
  float single_pass_residual;
  // Scratch for the hand-off of whole-chunk solves to the f16 kernel, [num_chunks, H,
  // MesaChunkedPrefillHandoffFloats(D)], or null: whole chunks then convert their operands in
  // place as slices do (see PrefillHandsOff).
  float* handoff;
};

cudaError_t LaunchMesaChunkedPrefill(const MesaPrefillArgs& args, cudaStream_t stream);

// Tokens per solve block for a step prefilling `prompts` prompts of these lengths: 16 or 32 when
// the slices holding tokens, one block an SM, still fit the device's SMs at once, else the whole
// chunk (kPrefillChunk).
int PickSolveRows(const int32_t* prompt_tokens, int64_t prompts, int num_heads, int sm_count);

// State rows per block of the chunk-start states' scan for a step prefilling `sequences`
// prompts: 32, or 64 when blocks of 32 rows would not all fit the SMs at once (a block of 64 rows
// takes longer a chunk, but the scan's chunks run one after another, so a second round of blocks
// costs more).
int PickChunkStateRows(int64_t sequences, int num_heads, int head_dim, int sm_count);

// Whether a step's whole-chunk solves should hand their f16 iterations to the warp-local kernel
// (MesaPrefillArgs::handoff): when their blocks outnumber the SMs. With at most one block an SM
// that kernel's 4 warps a block take as long a CG iteration as the first kernel's 8 (measured on
// an H200, one 512-token prompt of the 1B config: 103 us for 26 iterations either way), and the
// hand-off and the separate readout only add.
bool PrefillHandsOff(int64_t num_chunks, int num_heads, int sm_count);

// Floats of hand-off scratch per (chunk, head) at this head dim; 0 for an unsupported dim.
size_t MesaChunkedPrefillHandoffFloats(int head_dim);

// Dynamic shared memory the prefill's solve kernel needs per block at this head dim (a device
// must offer at least this much per block, opted in, to run it); 0 for an unsupported dim.
size_t MesaChunkedPrefillSharedBytes(int head_dim);

}  // namespace ridge::cuda
