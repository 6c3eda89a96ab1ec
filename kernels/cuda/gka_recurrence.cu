#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/gka_chunked_prefill.h"
#include "kernels/cuda/gka_head.cuh"
#include "kernels/cuda/gka_recurrence.h"
#include "kernels/packed_hs.h"

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

// Asks L2 for `bytes` (a multiple of 16) from a 16-byte aligned `p`, without waiting: the
// state's Ss is fetched while the block updates Hs and solves, so its reads after the solve
// find it there.
__device__ __forceinline__ void PrefetchToL2(const float* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Ss = decay Ss + k~ v~^T, and this thread's part of the readout's column sums r^T Ss. Thread t
// takes the four columns 4 (t % G).. (G = D / 4 groups, so a warp's loads are whole 128-byte
// lines) of rows t / G + 8 p, p = 0 .. D / 8 - 1; the loads of kInFlight rows are issued before
// any of them is used (the last token of a step, whose Hs is already stored, keeps them all in
// flight).
template <int D, int kInFlight>
__device__ __forceinline__ float4 UpdateSsAndReadOut(float* ss, float decay, const float* key,
                                                     const float* value, const float* readout) {
  constexpr int kGroups = D / 4, kRowStep = 2 * D / kGroups, kRows = D / kRowStep;
  static_assert(kRows % kInFlight == 0);
  const int group = threadIdx.x % kGroups, first_row = threadIdx.x / kGroups;
  const float4 v = reinterpret_cast<const float4*>(value)[group];
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
  for (int base = 0; base < kRows; base += kInFlight) {
    float4 s[kInFlight];
#pragma unroll
    for (int p = 0; p < kInFlight; ++p) {
      s[p] = reinterpret_cast<const float4*>(ss + (first_row + (base + p) * kRowStep) * D)[group];
    }
#pragma unroll
    for (int p = 0; p < kInFlight; ++p) {
      const int i = first_row + (base + p) * kRowStep;
      const float k = key[i], r = readout[i];
      s[p].x = decay * s[p].x + k * v.x;
      s[p].y = decay * s[p].y + k * v.y;
      s[p].z = decay * s[p].z + k * v.z;
      s[p].w = decay * s[p].w + k * v.w;
      reinterpret_cast<float4*>(ss + i * D)[group] = s[p];
      acc.x += r * s[p].x;
      acc.y += r * s[p].y;
      acc.z += r * s[p].z;
      acc.w += r * s[p].w;
    }
  }
  return acc;
}

// This thread's block of Hs (see kBlockRows) from its packed slot (kernels/packed_hs.h): the
// 4x4 blocks on or right of the diagonal as stored, those left of it transposed from their
// mirror (the same loads for every lane, so a warp does not diverge).
template <int D>
__device__ __forceinline__ void LoadHsBlock(const float* hs, int block_row, int block_col,
                                            float (&h)[kBlockRows][D / 16]) {
  constexpr int kGroups = D / 64;  // 4-column groups of a thread's block
#pragma unroll
  for (int rb = 0; rb < kBlockRows / 4; ++rb) {
#pragma unroll
    for (int cg = 0; cg < kGroups; ++cg) {
      const int block = block_row / 4 + rb, group = block_col / 4 + cg;
      const bool stored = group >= block;
      const int first = stored ? block : group, column_group = stored ? group : block;
      float4 v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        v[r] = *reinterpret_cast<const float4*>(
            hs + PackedHsOffset<int>(D, 4 * first + r, column_group));
      }
      const float e[4][4] = {{v[0].x, v[0].y, v[0].z, v[0].w},
                             {v[1].x, v[1].y, v[1].z, v[1].w},
                             {v[2].x, v[2].y, v[2].z, v[2].w},
                             {v[3].x, v[3].y, v[3].z, v[3].w}};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) h[4 * rb + r][4 * cg + c] = stored ? e[r][c] : e[c][r];
      }
    }
  }
}

// Writes this thread's blocks of Hs on or right of the diagonal back to the packed slot (every
// stored block is some thread's).
template <int D>
__device__ __forceinline__ void StoreHsBlock(float* hs, int block_row, int block_col,
                                             const float (&h)[kBlockRows][D / 16]) {
  constexpr int kGroups = D / 64;
#pragma unroll
  for (int rb = 0; rb < kBlockRows / 4; ++rb) {
#pragma unroll
    for (int cg = 0; cg < kGroups; ++cg) {
      const int block = block_row / 4 + rb, group = block_col / 4 + cg;
      if (group < block) continue;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        *reinterpret_cast<float4*>(hs + PackedHsOffset<int>(D, 4 * block + r, group)) =
            make_float4(h[4 * rb + r][4 * cg], h[4 * rb + r][4 * cg + 1], h[4 * rb + r][4 * cg + 2],
                        h[4 * rb + r][4 * cg + 3]);
      }
    }
  }
}

// What a head's solve gives its readout and the metrics.
struct ChebyshevResult {
  float x_row;  // x of this thread's row
  int iterations;
  bool capped;
  float relative_residual;  // ||(Hs + lam I) x - q|| / ||q|| of the x returned
};

// Where a solve's threads meet: x double-buffered (each iteration reads one and writes the
// other, so one barrier an iteration suffices), and each warp's share of ||residual||^2 beside it.
template <int D>
struct ChebyshevShared {
  __align__(16) float xs[2][D];
  __align__(16) float residual_parts[2][2 * D / 32];
};

// The Chebyshev iteration for (Hs + lam I) x = q from x0 = step q (spec section 3), this thread
// holding its block `h` of Hs and the scalars of row t / 2. kCheckEach: a tolerance is set, so
// the residual is checked every iteration; its warp sums cross the barrier that shares the next
// x, which is computed before the check and dropped if the check ends the solve (a block-wide
// sum of its own, two more barriers an iteration, made a solve with a tolerance of 1e-3 slower
// than 30 iterations without: tools/bench/RESULTS.md). Without it, only the last x's residual is
// measured, for the metrics.
template <int D, bool kCheckEach>
__device__ __forceinline__ ChebyshevResult ChebyshevSolve(const float (&h)[kBlockRows][D / 16],
                                                          ChebyshevShared<D>& shared,
                                                          float* scratch, int block_col, int lane16,
                                                          float q_row, float frobenius,
                                                          float ridge_strength, float tolerance,
                                                          int max_iterations) {
  constexpr int kThreads = 2 * D, kCols = D / 16;
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const float lam = ridge_strength * frobenius;
  const float step = 2.0f / (2.0f * lam + frobenius);
  const float half_ratio = frobenius / (2.0f * lam + frobenius) / 2.0f;
  const float r4 = half_ratio * half_ratio;
  const float q_norm2 = BlockSum<kThreads>(half == 0 ? q_row * q_row : 0.0f, scratch);
  const float stop_below = tolerance * tolerance * q_norm2;
  float x_prev = 0.0f, w = 2.0f, x_row = step * q_row, res2 = 0.0f;
  if (half == 0) shared.xs[0][row] = x_row;
  __syncthreads();
  int buffer = 0, iteration = 0;
  bool capped = false;
  for (;; ++iteration) {
    // (Hs x) for the block's rows: kBlockRows independent sums, then over the half warp.
    float x_cols[kCols];
    const float4* x = reinterpret_cast<const float4*>(shared.xs[buffer] + block_col);
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
    if constexpr (!kCheckEach) {
      if (last) {
        res2 = BlockSum<kThreads>(half == 0 ? res * res : 0.0f, scratch);
        break;
      }
    } else {
      // Both lanes of a row hold its residual: the sum over a warp's even lanes is the warp's.
      float warp_res2 = res * res;
#pragma unroll
      for (int offset = 2; offset < 32; offset <<= 1) {
        warp_res2 += __shfl_xor_sync(0xffffffffu, warp_res2, offset);
      }
      if ((threadIdx.x & 31) == 0) shared.residual_parts[buffer][threadIdx.x >> 5] = warp_res2;
    }
    const float w_next = 1.0f / (1.0f - r4 * w);
    const float x_next = w_next * x_row - (step * w_next * res + (w_next - 1.0f) * x_prev);
    if (half == 0) shared.xs[buffer ^ 1][row] = x_next;
    __syncthreads();
    if constexpr (kCheckEach) {
      const float4* parts = reinterpret_cast<const float4*>(shared.residual_parts[buffer]);
      float4 sum = parts[0];
#pragma unroll
      for (int p = 1; p < kThreads / 128; ++p) {
        const float4 more = parts[p];
        sum.x += more.x;
        sum.y += more.y;
        sum.z += more.z;
        sum.w += more.w;
      }
      res2 = (sum.x + sum.y) + (sum.z + sum.w);
      if (res2 <= stop_below) break;
      if (last) {
        capped = true;
        break;
      }
    }
    w = w_next;
    x_prev = x_row;
    x_row = x_next;
    buffer ^= 1;
  }
  return {x_row, iteration, capped, q_norm2 > 0.0f ? sqrtf(res2 / q_norm2) : 0.0f};
}

// Two blocks an SM: Hs in registers takes 128 of each thread's (at 170 registers, one block an
// SM ran 1.24x slower; tools/bench/RESULTS.md).
// Sequences with `chunked_from` tokens or more are the chunked kernel's.
template <int D>
__global__ void __launch_bounds__(2 * D, 2)
    GkaRecurrenceKernel(GkaRecurrenceArgs a, int32_t chunked_from) {
  constexpr int kThreads = 2 * D;
  constexpr int kReadoutParts = kThreads / (D / 4);  // threads of a column group (8)
  __shared__ float key[D], query[D], readout[D];
  __shared__ __align__(16) float value[D];
  __shared__ ChebyshevShared<D> solve_shared;
  __shared__ __align__(16) float readout_parts[kReadoutParts][D];
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
  if (t == 0) PrefetchToL2(ss, D * D * sizeof(float));

  // This thread's block of Hs (see kBlockRows), in registers for every token of the step.
  constexpr int kCols = D / 16;
  const int block_row = (t >> 5) * 16 + ((t >> 4) & 1) * kBlockRows, lane16 = t & 15;
  const int block_col = lane16 * kCols;
  float h[kBlockRows][kCols];
  LoadHsBlock<D>(hs, block_row, block_col, h);

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
    const bool last_token = token == tokens - 1;
    const float frobenius = sqrtf(BlockSum<kThreads>(squares, scratch));
    const float q_row = query[row];

    // The Chebyshev solve of (Hs + lam I) x = q: the pair of threads of a row both keep x_row.
    ChebyshevResult solved{};
    const bool solve = a.solve && frobenius > kSmallestFrobenius;
    if (solve) {
      solved =
          tolerance > 0.0f
              ? ChebyshevSolve<D, true>(h, solve_shared, scratch, block_col, lane16, q_row,
                                        frobenius, a.ridge_strength, tolerance, max_iterations)
              : ChebyshevSolve<D, false>(h, solve_shared, scratch, block_col, lane16, q_row,
                                         frobenius, a.ridge_strength, tolerance, max_iterations);
    }
    const float x_row = solved.x_row;
    if (half == 0) {
      readout[row] = !a.solve ? q_row
                     : solve  ? q_row + alpha * (x_row - q_row)
                              : (1.0f - alpha) * q_row;
    }
    __syncthreads();

    // Ss = decay Ss + k~ v~^T and o = d^-0.5 Ss^T r.
    constexpr int kRows = D / kReadoutParts;
    const float4 part = last_token
                            ? UpdateSsAndReadOut<D, kRows>(ss, decay, key, value, readout)
                            : UpdateSsAndReadOut<D, kRows / 2>(ss, decay, key, value, readout);
    reinterpret_cast<float4*>(readout_parts[t / (D / 4)])[t % (D / 4)] = part;
    __syncthreads();
    float o = 0.0f;
    if (t < D) {
#pragma unroll
      for (int p = 0; p < kReadoutParts; ++p) o += readout_parts[p][t];
      o *= rsqrtf(static_cast<float>(D));
    }
    // o_norm (RMSNorm over the head) and the output gate silu(g).
    const float mean_square = BlockSum<kThreads>(o * o, scratch) / D;
    if (t < D) {
      const float g = proj[a.g_column + head * D + t];
      const float gated = o * rsqrtf(mean_square + a.norm_eps) * o_norm_weight * g * Sigmoid(g);
      static_cast<__nv_bfloat16*>(a.out_bf16)[r * a.out_stride + head * D + t] =
          __float2bfloat16(gated);
    }
    if (t == 0 && a.solve) {
      a.counters[pair].Add(solved.iterations, solved.capped, solved.relative_residual);
    }
  }
  // Stored here, not before the last token's solve: stores issued before it made the kernel 9%
  // slower (tools/bench/RESULTS.md).
  StoreHsBlock<D>(hs, block_row, block_col, h);
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
