// Pieces shared by the chunked prefill's two solve kernels (kernels/cuda/mesa_chunked_prefill.cu
// and kernels/cuda/mesa_half_solve.cu): where a chunk's start state lives, its decays, the
// per-token statistics, and the hand-off record through which a tolerance-0 solve passes its CG
// from the first kernel (3xTF32 products) to the second (f16 products, a warp per 16 tokens).
// Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mesa_chunked_prefill.h"

namespace ridge::cuda {

inline constexpr int kL = kPrefillChunk;  // tokens per chunk

// The start state of chunk `chunk` for one head, Hs (matrix 0) or Gs (1), [D, D] row-major in the
// chunk-state scratch [num_chunks, H, 2, D, D].
template <int D>
__device__ __forceinline__ float* ChunkState(const MesaPrefillArgs& a, int chunk, int head,
                                             int matrix) {
  return a.chunk_states + ((static_cast<int64_t>(chunk) * a.num_heads + head) * 2 + matrix) * D * D;
}

// Where chunk `chunk`'s tokens are: its sequence, the step row of its first token, and how many
// it has (kL but in a prompt's last chunk).
struct ChunkTokens {
  int sequence, first, count;
};
__device__ __forceinline__ ChunkTokens LocateChunk(const MesaPrefillArgs& a, int chunk) {
  const int j = a.table.chunk_sequence[chunk], seq_begin = a.table.row_begin[j];
  const int first = seq_begin + (chunk - a.table.chunk_begin[j]) * kL;
  return {j, first, min(kL, seq_begin + a.table.row_count[j] - first)};
}

// The sum and the largest of v over the Lanes consecutive lanes (a power of two) that hold a
// token's columns, in every one of them.
template <int Lanes>
__device__ __forceinline__ float RowSum(float v) {
#pragma unroll
  for (int offset = 1; offset < Lanes; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <int Lanes>
__device__ __forceinline__ float RowMax(float v) {
#pragma unroll
  for (int offset = 1; offset < Lanes; offset <<= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Run by the first warp: g[t] the inclusive prefix sum of the chunk's log decays (two tokens a
// lane) and beta[t] its input gates, for t < kL (0 past n). The caller publishes them.
__device__ __forceinline__ void ChunkDecays(const MesaPrefillArgs& a, int64_t first, int n,
                                            int head, float* g, float* beta) {
  const int lane = threadIdx.x & 31, i0 = 2 * lane;
  const int64_t H = a.num_heads;
  const float l0 = i0 < n ? a.log_gamma[(first + i0) * H + head] : 0.0f;
  const float l1 = i0 + 1 < n ? a.log_gamma[(first + i0 + 1) * H + head] : 0.0f;
  float pair = l0 + l1, scan = pair;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float up = __shfl_up_sync(0xffffffffu, scan, offset);
    if (lane >= offset) scan += up;
  }
  const float before = scan - pair;
  g[i0] = before + l0;
  g[i0 + 1] = scan;
  beta[i0] = i0 < n ? a.beta[(first + i0) * H + head] : 0.0f;
  beta[i0 + 1] = i0 + 1 < n ? a.beta[(first + i0 + 1) * H + head] : 0.0f;
}

// One token's solve added to its sequence's counters (sequence j, head `head`).
__device__ __forceinline__ void AddSolveStats(const MesaPrefillArgs& a, int j, int head,
                                              float initial_norm, float residual_norm,
                                              int iterations, bool converged) {
  const float residual = initial_norm > 0.0f ? residual_norm / initial_norm : 0.0f;
  const int max_iterations = a.table.max_iterations[j];
  const bool capped = initial_norm > 0.0f && iterations >= max_iterations && !converged;
  SolveCounters& counters = a.counters[j * a.num_heads + head];
  atomicAdd(&counters.solves, 1);
  atomicAdd(&counters.total_iterations, iterations);
  atomicMax(&counters.max_iterations, iterations);
  atomicAdd(&counters.capped, capped ? 1 : 0);
  atomicAdd(&counters.sum_residual, residual);
  atomicMax(reinterpret_cast<int*>(&counters.max_residual), __float_as_int(residual));
}

// The hand-off record of one (chunk, head), floats (ints stored as their bits): x, r and p
// [kL, D] row-major, then per token ||r||^2, ||r_0||, whether its CG is still running and its
// iterations so far, then the block's iteration count, 1 when the solve was handed off (the first
// kernel writes 0 or 1 for every record), and the power of two that brings Hs_c's largest entry
// into [1, 2).
template <int D>
struct Handoff {
  static constexpr int kX = 0;
  static constexpr int kR = kX + kL * D;
  static constexpr int kP = kR + kL * D;
  static constexpr int kDelta = kP + kL * D;
  static constexpr int kInitialNorm = kDelta + kL;
  static constexpr int kActive = kInitialNorm + kL;
  static constexpr int kIterations = kActive + kL;
  static constexpr int kIteration = kIterations + kL;
  static constexpr int kHandedOff = kIteration + 1;
  static constexpr int kHsScale = kHandedOff + 1;
  static constexpr int kFloats = kHsScale + 2;  // 16-byte aligned records
  static_assert(kFloats % 4 == 0, "records stay 16-byte aligned");
};

template <int D>
__device__ __forceinline__ float* HandoffRecord(const MesaPrefillArgs& a, int chunk, int head) {
  return a.handoff + (static_cast<int64_t>(chunk) * a.num_heads + head) * Handoff<D>::kFloats;
}

// The f16 solve of every handed-off record (kernels/cuda/mesa_half_solve.cu): the rest of its CG
// iterations, the statistics, and x back into the record for the readout.
cudaError_t LaunchMesaHalfSolve(const MesaPrefillArgs& a, cudaStream_t stream);

}  // namespace ridge::cuda
