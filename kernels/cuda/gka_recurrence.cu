#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/gka_chunked_prefill.h"
#include "kernels/cuda/gka_head.cuh"
#include "kernels/cuda/gka_recurrence.h"

namespace ridge::cuda {
namespace {

using gka_internal::GkaGates;
using gka_internal::GkaHead;
using gka_internal::kL2NormEps;
using gka_internal::kSmallestFrobenius;
using gka_internal::Sigmoid;

// The sum of `value` over the block's threads, in every thread. `scratch` holds one float per
// warp; the call ends with a barrier, so the scratch may be reused right after.
template <int kThreads>
__device__ float BlockSum(float value, float* scratch) {
  constexpr int kWarps = kThreads / 32;
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += scratch[w];
  __syncthreads();
  return sum;
}

// Hs in registers: warp w holds rows [16w, 16w + 16); lane (g, c) = (lane / 16, lane % 16) holds
// the 8 x kCols block at rows 16w + 8g, columns c * kCols (kCols = D / 16). A product Hs x then
// reads only kCols entries of x a thread (the layout of half a row a thread read all D / 2:
// shared-memory reads bound the solve) and sums each row over its 16 lanes by a reduce-scatter,
// after which lane pair (2i, 2i + 1) of each half warp holds row 16w + 8g + i: thread t holds
// row t / 2, the row whose scalars (x, q, the residual) it keeps.
constexpr int kBlockRows = 8;

// The full sums of rows 0..7 of `partial` over the 16 lanes of a half warp; lane c gets row c / 2.
__device__ __forceinline__ float ReduceRowSums(const float (&partial)[kBlockRows], int c) {
  const bool b3 = c & 8, b2 = c & 4, b1 = c & 2;
  float four[4], two[2];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float mine = b3 ? partial[4 + k] : partial[k];
    const float other = b3 ? partial[k] : partial[4 + k];
    four[k] = mine + __shfl_xor_sync(0xffffffffu, other, 8);
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const float mine = b2 ? four[2 + k] : four[k];
    const float other = b2 ? four[k] : four[2 + k];
    two[k] = mine + __shfl_xor_sync(0xffffffffu, other, 4);
  }
  const float one = (b1 ? two[1] : two[0]) + __shfl_xor_sync(0xffffffffu, b1 ? two[0] : two[1], 2);
  return one + __shfl_xor_sync(0xffffffffu, one, 1);
}

// Two blocks an SM: Hs in registers takes 128 of each thread's (at 170 registers, one block an
// SM ran 1.24x slower; tools/bench/RESULTS.md).
// Sequences with `chunked_from` tokens or more are the chunked kernel's.
template <int D>
__global__ void __launch_bounds__(2 * D, 2)
    GkaRecurrenceKernel(GkaRecurrenceArgs a, int32_t chunked_from) {
  constexpr int kThreads = 2 * D, kHalf = D / 2;
  __shared__ float key[D], value[D], query[D], readout[D];
  __shared__ __align__(16) float xs[2][D];
  __shared__ float partial[D];
  __shared__ float scratch[kThreads / 32];

  const int seq = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int t = threadIdx.x, row = t >> 1, half = t & 1;
  const int64_t pair = static_cast<int64_t>(seq) * a.counters_stride + head;
  const int32_t first_row = a.sequences.row_begin[seq], tokens = a.sequences.row_count[seq];
  if (tokens == 0 || tokens >= chunked_from) return;
  const GkaHead<D> mine(a, seq, head);
  float* hs = mine.hs;
  float* ss = mine.ss;
  const float tolerance = a.sequences.tolerance[seq];
  const int max_iterations = a.sequences.max_iterations[seq];
  const float o_norm_weight = t < D ? a.o_norm[t] : 0.0f;

  // This thread's block of Hs (see kBlockRows), in registers for every token of the step.
  constexpr int kCols = D / 16;
  const int block_row = (t >> 5) * 16 + ((t >> 4) & 1) * kBlockRows, lane16 = t & 15;
  const int block_col = lane16 * kCols;
  float h[kBlockRows][kCols];
#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    const float4* src = reinterpret_cast<const float4*>(hs + (block_row + i) * D + block_col);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const float4 v = src[c];
      h[i][4 * c] = v.x;
      h[i][4 * c + 1] = v.y;
      h[i][4 * c + 2] = v.z;
      h[i][4 * c + 3] = v.w;
    }
  }

  for (int32_t token = 0; token < tokens; ++token) {
    const int64_t r = first_row + token;
    const float* qkv = a.qkv + r * a.qkv_stride;
    const float* proj = a.proj + r * a.proj_stride;
    const GkaGates gates = mine.Gates(a, proj, head);
    const float beta = gates.beta, alpha = gates.alpha, decay = expf(gates.log_decay);
    const float q_raw = t < D ? qkv[mine.q_column + t] : 0.0f;
    const float k_raw = t < D ? qkv[mine.k_column + t] : 0.0f;
    const float q_scale = 1.0f / (sqrtf(BlockSum<kThreads>(q_raw * q_raw, scratch)) + kL2NormEps);
    const float k_scale = 1.0f / (sqrtf(BlockSum<kThreads>(k_raw * k_raw, scratch)) + kL2NormEps);
    if (t < D) {
      key[t] = beta * k_scale * k_raw;
      value[t] = beta * qkv[mine.v_column + t];
      query[t] = q_scale * q_raw;
    }
    __syncthreads();

    // Hs = decay Hs + k~ k~^T.
    float squares = 0.0f;
    {
      float k_rows[kBlockRows], k_cols[kCols];
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) k_rows[i] = key[block_row + i];
#pragma unroll
      for (int j = 0; j < kCols; ++j) k_cols[j] = key[block_col + j];
#pragma unroll
      for (int i = 0; i < kBlockRows; ++i) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          h[i][j] = decay * h[i][j] + k_rows[i] * k_cols[j];
          squares += h[i][j] * h[i][j];
        }
      }
    }
    const float frobenius = sqrtf(BlockSum<kThreads>(squares, scratch));
    const float q_row = query[row];

    // The Chebyshev solve of (Hs + lam I) x = q: the pair of threads of a row both keep x_row.
    int iterations = 0;
    bool capped = false;
    float relative_residual = 0.0f;
    float x_row = 0.0f;
    const bool solve = a.solve && frobenius > kSmallestFrobenius;
    if (solve) {
      const float lam = a.ridge_strength * frobenius;
      const float step = 2.0f / (2.0f * lam + frobenius);
      const float half_ratio = frobenius / (2.0f * lam + frobenius) / 2.0f;
      const float r4 = half_ratio * half_ratio;
      const float q_norm2 = BlockSum<kThreads>(half == 0 ? q_row * q_row : 0.0f, scratch);
      float x_prev = 0.0f, w = 2.0f;
      x_row = step * q_row;
      if (half == 0) xs[0][row] = x_row;
      __syncthreads();
      int buffer = 0;
      for (int iteration = 0;; ++iteration) {
        // (Hs x) for the block's rows: kBlockRows independent sums, then over the half warp.
        float x_cols[kCols];
        const float4* x = reinterpret_cast<const float4*>(xs[buffer] + block_col);
#pragma unroll
        for (int c = 0; c < kCols / 4; ++c) {
          const float4 x4 = x[c];
          x_cols[4 * c] = x4.x;
          x_cols[4 * c + 1] = x4.y;
          x_cols[4 * c + 2] = x4.z;
          x_cols[4 * c + 3] = x4.w;
        }
        float partial[kBlockRows];
#pragma unroll
        for (int i = 0; i < kBlockRows; ++i) {
          partial[i] = h[i][0] * x_cols[0];
#pragma unroll
          for (int j = 1; j < kCols; ++j) partial[i] += h[i][j] * x_cols[j];
        }
        const float dot = ReduceRowSums(partial, lane16);
        const float res = dot + lam * x_row - q_row;
        const bool last = iteration == max_iterations;
        if (tolerance > 0.0f || last) {  // the same for every thread of the block
          const float res2 = BlockSum<kThreads>(half == 0 ? res * res : 0.0f, scratch);
          relative_residual = q_norm2 > 0.0f ? sqrtf(res2 / q_norm2) : 0.0f;
          if (tolerance > 0.0f && res2 <= tolerance * tolerance * q_norm2) break;
          if (last) {
            capped = tolerance > 0.0f;
            break;
          }
        }
        w = 1.0f / (1.0f - r4 * w);
        const float update = step * w * res + (w - 1.0f) * x_prev;
        x_prev = x_row;
        x_row = w * x_row - update;
        buffer ^= 1;
        if (half == 0) xs[buffer][row] = x_row;
        __syncthreads();
        iterations = iteration + 1;
      }
    }
    if (half == 0) {
      readout[row] = !a.solve ? q_row
                     : solve  ? q_row + alpha * (x_row - q_row)
                              : (1.0f - alpha) * q_row;
    }
    __syncthreads();

    // Ss = decay Ss + k~ v~^T and o = d^-0.5 Ss^T q~: thread (column j, half of the rows).
    const int j = t % D, rows_half = t / D;
    float acc = 0.0f;
#pragma unroll 16
    for (int i = rows_half * kHalf; i < (rows_half + 1) * kHalf; ++i) {
      float* p = ss + i * D + j;
      const float s = decay * *p + key[i] * value[j];
      *p = s;
      acc += readout[i] * s;
    }
    if (rows_half == 1) partial[j] = acc;
    __syncthreads();
    // o_norm (RMSNorm over the head) and the output gate silu(g).
    const float o = rows_half == 0 ? (acc + partial[j]) * rsqrtf(static_cast<float>(D)) : 0.0f;
    const float mean_square = BlockSum<kThreads>(o * o, scratch) / D;
    if (rows_half == 0) {
      const float g = proj[a.g_column + head * D + j];
      const float gated = o * rsqrtf(mean_square + a.norm_eps) * o_norm_weight * g * Sigmoid(g);
      static_cast<__nv_bfloat16*>(a.out_bf16)[r * a.out_stride + head * D + j] =
          __float2bfloat16(gated);
    }
    if (t == 0 && a.solve) a.counters[pair].Add(iterations, capped, relative_residual);
  }

#pragma unroll
  for (int i = 0; i < kBlockRows; ++i) {
    float4* dst = reinterpret_cast<float4*>(hs + (block_row + i) * D + block_col);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      dst[c] = make_float4(h[i][4 * c], h[i][4 * c + 1], h[i][4 * c + 2], h[i][4 * c + 3]);
    }
  }
}

}  // namespace

bool IsGkaHeadDim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchGkaRecurrence(const GkaRecurrenceArgs& args, cudaStream_t stream) {
  if (!IsGkaHeadDim(args.head_dim)) return cudaErrorInvalidValue;
  const int blocks = args.num_sequences * args.heads;
  if (blocks == 0) return cudaSuccess;
  int32_t chunked_from = INT32_MAX;
  if (GkaChunkedPrefillTakes(args)) {
    if (const cudaError_t e = LaunchGkaChunkedPrefill(args, stream); e != cudaSuccess) return e;
    chunked_from = kChunkedFromTokens;
  }
  if (args.head_dim == 64) {
    GkaRecurrenceKernel<64><<<blocks, 128, 0, stream>>>(args, chunked_from);
  } else {
    GkaRecurrenceKernel<128><<<blocks, 256, 0, stream>>>(args, chunked_from);
  }
  return cudaGetLastError();
}

}  // namespace ridge::cuda
