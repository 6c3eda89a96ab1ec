// Gated KalmaNet's recurrence for prompt pieces, a chunk of kChunk tokens at a time
// (kernels/cuda/gka_recurrence.h routes sequences with many tokens here). Within a chunk every
// token's Gram matrix is the chunk-start state plus the chunk's keys so far,
//   Hs_t = g_t Hs_0 + sum_{s <= t} w_st k~_s k~_s^T,   g_t = prod_{r <= t} decay_r,
//   w_st = prod_{s < r <= t} decay_r = exp(L_t - L_s)   (L: the chunk's cumulative log decay),
// so the Chebyshev iterations of all the chunk's tokens run together: each is one product with
// Hs_0 for the whole chunk, K X^T and its transpose (spec section 4 per token, with each token's
// own ||Hs_t||_F, ridge and stopping). ||Hs_t||_F^2 follows from
//   ||Hs_t||^2 = decay_t^2 ||Hs_{t-1}||^2 + 2 decay_t k~_t^T Hs_{t-1} k~_t + ||k~_t||^4,
// with k~_t^T Hs_{t-1} k~_t = g_{t-1} k~_t^T Hs_0 k~_t + sum_{s < t} w_s,t-1 (k~_s . k~_t)^2 (all
// terms >= 0: no cancellation). The readouts use Ss_t the same way, and the chunk ends by
// folding its keys and values into Hs and Ss. The whole state stays in shared memory for the
// sequence's tokens; it is read and written once per step.
//
// Blocks of 256 threads, one to four per (sequence, head) with at least kChunkedFromTokens tokens
// (GkaChunkedPrefillKernel says how they share it); a warp owns up to 4 tokens of a chunk and
// lane c their columns 4c..4c+3, so every per-token sum (norms, residuals, o_norm) is a warp
// reduction and the iterations need two barriers each. The products read shared memory as float4
// (shared-memory traffic bounds them). With args.tensor_core_products, the products of the
// chunk's rows with Hs_0 and Ss_0 (two thirds of an iteration's multiply-adds) run on the tensor
// cores instead (3xTF32, about fp32's accuracy) and meet the rest through shared memory.
// head_dim 128 only.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/dynamic_shared_memory.h"
#include "kernels/cuda/gka_chunked_prefill.h"
#include "kernels/cuda/gka_head.cuh"
#include "kernels/cuda/tf32x3_mma.h"

namespace ridge::cuda {
namespace {

using gka_internal::GkaGates;
using gka_internal::GkaHead;
using gka_internal::kL2NormEps;
using gka_internal::kSmallestFrobenius;
using gka_internal::Sigmoid;

constexpr int D = 128;
constexpr int kChunk = 32;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kTokensPerWarp = kChunk / kWarps;  // 4
constexpr int kColumns = D / 32;                 // a lane's columns: 4 c .. 4 c + 3
// Token rows are padded to D + 4 floats: rows stay 16-byte aligned, and lanes t = 0..7 reading
// float4 i of rows t hit distinct banks.
constexpr int kStride = D + 4;
constexpr int kPairStride = kChunk + 4;

struct ChunkShared {
  float hs[D * D], ss[D * D];  // the state, [row][column]
  // The chunk's tokens, [token][column] (kStride apart): k~ = beta k/|k|, v~ = beta v, q/|q|, and
  // the iterate x (then the readout).
  float key[kChunk * kStride], value[kChunk * kStride], query[kChunk * kStride],
      x[kChunk * kStride];
  float y[kChunk * kStride];           // rows times Hs_0 or Ss_0, from the tensor cores
  float pair[kChunk * kPairStride];    // w_st (k~_s . x_t), s <= t
  float gram[kChunk * kPairStride];    // k~_s . k~_t
  float weight[kChunk * kPairStride];  // w_st, 0 for s > t
  float log_decay[kChunk], cumulative[kChunk], alpha[kChunk], u[kChunk];
  float lam[kChunk], step[kChunk], r4[kChunk];
  int solve[kChunk];  // ||Hs_t||_F above kSmallestFrobenius
  int iterations[kChunk], capped[kChunk];
  float residual[kChunk];
  double partial[kWarps];
};

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float4 Load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void Store4(float* p, const float (&v)[kColumns]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ float Dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// out[u][m] = sum_i rows[first + u][i] matrix[i][4c + m] for a warp's kTpw tokens from `first`:
// the tokens' rows times a D x D matrix (Hs_0 x, as Hs is symmetric, or r^T Ss_0).
template <int kTpw>
__device__ __forceinline__ void RowsTimesMatrix(const float* rows, const float* matrix, int first,
                                                int lane, float (&out)[kTpw][kColumns]) {
#pragma unroll
  for (int u = 0; u < kTpw; ++u) {
#pragma unroll
    for (int m = 0; m < kColumns; ++m) out[u][m] = 0.0f;
  }
#pragma unroll 2
  for (int i = 0; i < D; i += 4) {
    float r[kTpw][4];
#pragma unroll
    for (int u = 0; u < kTpw; ++u) {
      const float4 v = Load4(rows + (first + u) * kStride + i);
      r[u][0] = v.x, r[u][1] = v.y, r[u][2] = v.z, r[u][3] = v.w;
    }
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const float4 m4 = Load4(matrix + (i + ii) * D + 4 * lane);
      const float v[kColumns] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
      for (int u = 0; u < kTpw; ++u) {
#pragma unroll
        for (int m = 0; m < kColumns; ++m) out[u][m] += r[u][ii] * v[m];
      }
    }
  }
}

// y[r][j] = sum_i rows[r][i] matrix[i][j] (D x D, row-major) for the chunk rows r in
// [16 first_tile, 16 (first_tile + kMTiles)) on the tensor cores (mma.m16n8k8 .tf32, 3xTF32):
// warp w the columns [16 w, 16 w + 16), two tiles of 8. Fragments come straight from the row-major
// operands (kernels/mma_fragment_order.h has their tables), split into TF32 hi and lo as loaded.
template <int kMTiles>
__device__ __forceinline__ void TensorCoreRowsTimesMatrix(const float* rows, const float* matrix,
                                                          int first_tile, int warp, int lane,
                                                          float* y) {
  const int g = lane >> 2, q = lane & 3;
  float c[kMTiles][2][4] = {};
#pragma unroll 2
  for (int k = 0; k < D; k += 8) {
    FragmentA a[kMTiles];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      // a0 = A[g][q], a1 = A[g+8][q], a2 = A[g][q+4], a3 = A[g+8][q+4] of the tile at (16 mt, k).
      const float* at = rows + (16 * (first_tile + mt) + g) * kStride + k + q;
      SplitInto(at[0], a[mt].hi[0], a[mt].lo[0]);
      SplitInto(at[8 * kStride], a[mt].hi[1], a[mt].lo[1]);
      SplitInto(at[4], a[mt].hi[2], a[mt].lo[2]);
      SplitInto(at[8 * kStride + 4], a[mt].hi[3], a[mt].lo[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      // b0 = B[q][g], b1 = B[q+4][g] of the tile at (k, 16 w + 8 nt).
      const float* bt = matrix + (k + q) * D + 16 * warp + 8 * nt + g;
      FragmentB b;
      SplitInto(bt[0], b.hi[0], b.lo[0]);
      SplitInto(bt[4 * D], b.hi[1], b.lo[1]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) MmaTf32x3(c[mt][nt], a[mt], b);
    }
  }
  // c0 = C[g][2q], c1 = C[g][2q+1], c2 = C[g+8][2q], c3 = C[g+8][2q+1].
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float* at = y + (16 * (first_tile + mt) + g) * kStride + 16 * warp + 8 * nt + 2 * q;
      *reinterpret_cast<float2*>(at) = make_float2(c[mt][nt][0], c[mt][nt][1]);
      *reinterpret_cast<float2*>(at + 8 * kStride) = make_float2(c[mt][nt][2], c[mt][nt][3]);
    }
  }
}

// out[u][m] = y[first + u][4c + m]: a warp's tokens' columns of the tensor cores' product.
template <int kTpw>
__device__ __forceinline__ void LoadProductRows(const float* y, int first, int lane,
                                                float (&out)[kTpw][kColumns]) {
#pragma unroll
  for (int u = 0; u < kTpw; ++u) {
    const float4 v = Load4(y + (first + u) * kStride + 4 * lane);
    out[u][0] = v.x, out[u][1] = v.y, out[u][2] = v.z, out[u][3] = v.w;
  }
}

// dots[v] = key[4w + v] . rows[lane] for v = 0..3: warp w takes keys s = 4w..4w+3, lane t.
__device__ __forceinline__ void KeyDots(const ChunkShared& sh, const float* rows, int warp,
                                        int lane, float (&dots)[kTokensPerWarp]) {
#pragma unroll
  for (int v = 0; v < kTokensPerWarp; ++v) dots[v] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < D; i += 4) {
    const float4 r = Load4(rows + lane * kStride + i);
#pragma unroll
    for (int v = 0; v < kTokensPerWarp; ++v) {
      dots[v] += Dot4(Load4(sh.key + (kTokensPerWarp * warp + v) * kStride + i), r);
    }
  }
}

// pair[s][t] = weight[s][t] (key[s] . rows[t]) for keys s = 4w..4w+3 and the block's kChunk / P
// tokens t from `base`: lane (t - base) + (kChunk / P) j sums columns [j D/P, (j + 1) D/P), and
// the P partial sums meet across lanes.
template <int P>
__device__ __forceinline__ void MaskedPairs(ChunkShared& sh, const float* rows, int base, int warp,
                                            int lane) {
  constexpr int kTokens = kChunk / P, kSpan = D / P;
  const int t = base + lane % kTokens, first_column = (lane / kTokens) * kSpan;
  float dots[kTokensPerWarp] = {};
#pragma unroll 4
  for (int i = first_column; i < first_column + kSpan; i += 4) {
    const float4 r = Load4(rows + t * kStride + i);
#pragma unroll
    for (int v = 0; v < kTokensPerWarp; ++v) {
      dots[v] += Dot4(Load4(sh.key + (kTokensPerWarp * warp + v) * kStride + i), r);
    }
  }
#pragma unroll
  for (int offset = kTokens; offset < 32; offset <<= 1) {
#pragma unroll
    for (int v = 0; v < kTokensPerWarp; ++v) {
      dots[v] += __shfl_xor_sync(0xffffffffu, dots[v], offset);
    }
  }
  if (lane < kTokens) {
#pragma unroll
    for (int v = 0; v < kTokensPerWarp; ++v) {
      const int s = kTokensPerWarp * warp + v;
      sh.pair[s * kPairStride + t] = sh.weight[s * kPairStride + t] * dots[v];
    }
  }
}

// out[u][m] += sum_s pair[s][first + u] rows[s][4c + m] over the chunk's tokens s.
template <int kTpw>
__device__ __forceinline__ void AddPairsTimesRows(const ChunkShared& sh, const float* rows,
                                                  int tokens, int first, int lane,
                                                  float (&out)[kTpw][kColumns]) {
  for (int s = 0; s < tokens; ++s) {
    const float4 r4 = Load4(rows + s * kStride + 4 * lane);
    const float v[kColumns] = {r4.x, r4.y, r4.z, r4.w};
#pragma unroll
    for (int u = 0; u < kTpw; ++u) {
      const float p = sh.pair[s * kPairStride + first + u];
#pragma unroll
      for (int m = 0; m < kColumns; ++m) out[u][m] += p * v[m];
    }
  }
}

// out[u][m] = (g_t matrix^T rows[t] + sum_{s <= t} w_st (k~_s . rows[t]) values[s])[4c + m] for
// the warp's tokens t = first + u: Hs_t x_t (rows x, matrix Hs_0 (symmetric), values k~) or
// Ss_t^T r_t (rows r, matrix Ss_0, values v~). Every thread of the block calls it (a barrier).
// With kTensorCores the block's rows (its 16-row tiles) go through the tensor cores and sh.y.
template <int P, int kTpw, bool kTensorCores>
__device__ __forceinline__ void ChunkProduct(ChunkShared& sh, const float* rows,
                                             const float* matrix, const float* values, int n,
                                             int base, int first, int warp, int lane,
                                             float (&out)[kTpw][kColumns]) {
  if constexpr (kTensorCores) {
    TensorCoreRowsTimesMatrix<P == 1 ? 2 : 1>(rows, matrix, P == 1 ? 0 : base / 16, warp, lane,
                                              sh.y);
  } else {
    RowsTimesMatrix<kTpw>(rows, matrix, first, lane, out);
  }
  MaskedPairs<P>(sh, rows, base, warp, lane);
  __syncthreads();
  if constexpr (kTensorCores) LoadProductRows<kTpw>(sh.y, first, lane, out);
#pragma unroll
  for (int u = 0; u < kTpw; ++u) {
    const float g = expf(sh.cumulative[first + u]);
#pragma unroll
    for (int m = 0; m < kColumns; ++m) out[u][m] *= g;
  }
  AddPairsTimesRows<kTpw>(sh, values, n, first, lane, out);
}

// P blocks share a (sequence, head): each one solves and reads out kChunk / P of every chunk's
// tokens (warp w: kTokensPerWarp / P of them) and repeats the rest (the chunk's keys, norms and
// state update), so that a single prompt's heads fill more of the GPU; block 0 writes the state.
template <int P, bool kTensorCores>
__global__ void __launch_bounds__(kThreads, 1) GkaChunkedPrefillKernel(GkaRecurrenceArgs a) {
  constexpr int kTpw = kTokensPerWarp / P;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  ChunkShared& sh = *reinterpret_cast<ChunkShared*>(shared_bytes);
  const int item = blockIdx.x / P, part = blockIdx.x % P;
  const int seq = item / a.heads, head = item % a.heads;
  const int32_t tokens = a.sequences.row_count[seq];
  if (tokens < kChunkedFromTokens) return;  // the token-by-token kernel takes it
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int base = part * (kChunk / P), first = base + warp * kTpw;  // the block's, the warp's
  const int32_t first_row = a.sequences.row_begin[seq];
  const int64_t pair_index = static_cast<int64_t>(seq) * a.counters_stride + head;
  const GkaHead<D> mine(a, seq, head);
  float* hs_slot = mine.hs;
  float* ss_slot = mine.ss;
  const float tolerance = a.sequences.tolerance[seq];
  const int max_iterations = a.sequences.max_iterations[seq];

  gka_internal::UnpackHs<D, kThreads>(hs_slot, sh.hs);
  for (int e = tid; e < D * D / 4; e += kThreads) {
    reinterpret_cast<float4*>(sh.ss)[e] = reinterpret_cast<const float4*>(ss_slot)[e];
  }
  __syncthreads();

  for (int32_t chunk_first = 0; chunk_first < tokens; chunk_first += kChunk) {
    const int n = min(kChunk, tokens - chunk_first);  // the chunk's tokens
    // The chunk's q, k, v (normalised, gated) and gates; tokens past n are zeros.
#pragma unroll
    for (int u = 0; u < kTokensPerWarp; ++u) {
      const int t = kTokensPerWarp * warp + u;
      const bool valid = t < n;
      const int64_t r = first_row + chunk_first + t;
      const float* qkv = a.qkv + r * a.qkv_stride;
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 q4 = valid ? Load4(qkv + mine.q_column + 4 * lane) : zero;
      const float4 k4 = valid ? Load4(qkv + mine.k_column + 4 * lane) : zero;
      const float4 v4 = valid ? Load4(qkv + mine.v_column + 4 * lane) : zero;
      const float q2 = Dot4(q4, q4), k2 = Dot4(k4, k4);
      const float q_scale = 1.0f / (sqrtf(WarpSum(q2)) + kL2NormEps);
      const float k_scale = 1.0f / (sqrtf(WarpSum(k2)) + kL2NormEps);
      // Tokens past n: no key, no value, no decay.
      const GkaGates gates =
          valid ? mine.Gates(a, a.proj + r * a.proj_stride, head) : GkaGates{0.0f, 0.0f, 0.0f};
      const float beta = gates.beta, alpha = gates.alpha, log_decay = gates.log_decay;
      const float key_scale = beta * k_scale;
      const float key[kColumns] = {key_scale * k4.x, key_scale * k4.y, key_scale * k4.z,
                                   key_scale * k4.w};
      const float value[kColumns] = {beta * v4.x, beta * v4.y, beta * v4.z, beta * v4.w};
      const float query[kColumns] = {q_scale * q4.x, q_scale * q4.y, q_scale * q4.z,
                                     q_scale * q4.w};
      Store4(sh.key + t * kStride + 4 * lane, key);
      Store4(sh.value + t * kStride + 4 * lane, value);
      Store4(sh.query + t * kStride + 4 * lane, query);
      if (lane == 0) {
        sh.log_decay[t] = log_decay;
        sh.alpha[t] = alpha;
      }
    }
    __syncthreads();
    if (tid < 32) {  // L_t, a prefix sum over the chunk
      float l = sh.log_decay[lane];
      for (int offset = 1; offset < 32; offset <<= 1) {
        const float before = __shfl_up_sync(0xffffffffu, l, offset);
        if (lane >= offset) l += before;
      }
      sh.cumulative[lane] = l;
    }
    // ||Hs_0||_F^2 in double, as the CPU's step.
    {
      double squares = 0.0;
      for (int e = tid; e < D * D; e += kThreads) squares += double(sh.hs[e]) * sh.hs[e];
      squares = WarpSum(squares);
      if (lane == 0) sh.partial[warp] = squares;
    }
    __syncthreads();
    for (int e = tid; e < kChunk * kChunk; e += kThreads) {
      const int s = e / kChunk, t = e % kChunk;
      sh.weight[s * kPairStride + t] = s <= t ? expf(sh.cumulative[t] - sh.cumulative[s]) : 0.0f;
    }
    // gram[s][t] = k~_s . k~_t (warp w: s = 4w..4w+3, lane t), and u_t = k~_t^T Hs_0 k~_t.
    {
      float dot[kTokensPerWarp];
      KeyDots(sh, sh.key, warp, lane, dot);
#pragma unroll
      for (int v = 0; v < kTokensPerWarp; ++v) {
        sh.gram[(kTokensPerWarp * warp + v) * kPairStride + lane] = dot[v];
      }
      float hk[kTokensPerWarp][kColumns];
      if constexpr (kTensorCores) {
        TensorCoreRowsTimesMatrix<2>(sh.key, sh.hs, 0, warp, lane, sh.y);
        __syncthreads();
        LoadProductRows<kTokensPerWarp>(sh.y, kTokensPerWarp * warp, lane, hk);
      } else {
        RowsTimesMatrix<kTokensPerWarp>(sh.key, sh.hs, kTokensPerWarp * warp, lane, hk);
      }
#pragma unroll
      for (int u = 0; u < kTokensPerWarp; ++u) {
        const int t = kTokensPerWarp * warp + u;
        float s = 0.0f;
#pragma unroll
        for (int m = 0; m < kColumns; ++m) s += hk[u][m] * sh.key[t * kStride + 4 * lane + m];
        s = WarpSum(s);
        if (lane == 0) sh.u[t] = s;
      }
    }
    __syncthreads();
    // ||Hs_t||_F for t = 0..n-1 (warp 0, a token at a time), then each token's solve constants.
    if (warp == 0) {
      double frobenius2 = 0.0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) frobenius2 += sh.partial[w];
      for (int t = 0; t < n; ++t) {
        float term = 0.0f;
        if (lane < t) {
          const float g = sh.gram[lane * kPairStride + t];
          term = sh.weight[lane * kPairStride + t - 1] * g * g;
        }
        const float previous_scale = t == 0 ? 1.0f : expf(sh.cumulative[t - 1]);
        const double khk = double(previous_scale) * sh.u[t] + WarpSum(term);
        const double decay = exp(double(sh.log_decay[t]));
        const double kk = sh.gram[t * kPairStride + t];
        frobenius2 = decay * decay * frobenius2 + 2.0 * decay * khk + kk * kk;
        if (lane == 0) {
          const float frobenius = static_cast<float>(sqrt(fmax(frobenius2, 0.0)));
          const float lam = a.ridge_strength * frobenius;
          const float half_ratio = frobenius / (2.0f * lam + frobenius) / 2.0f;
          sh.solve[t] = a.solve && frobenius > kSmallestFrobenius;
          sh.lam[t] = lam;
          sh.step[t] = 2.0f / (2.0f * lam + frobenius);
          sh.r4[t] = half_ratio * half_ratio;
        }
      }
    }
    __syncthreads();

    // The Chebyshev solves of (Hs_t + lam_t I) x_t = q_t, all of the chunk's tokens together.
    float q[kTpw][kColumns], x[kTpw][kColumns], x_prev[kTpw][kColumns];
    float q_norm2[kTpw], w_cheb[kTpw], relative[kTpw];
    bool active[kTpw];
    int iterations[kTpw];
    bool capped[kTpw];
#pragma unroll
    for (int u = 0; u < kTpw; ++u) {
      const int t = first + u;
      float q2 = 0.0f;
#pragma unroll
      for (int m = 0; m < kColumns; ++m) {
        q[u][m] = sh.query[t * kStride + 4 * lane + m];
        q2 += q[u][m] * q[u][m];
        x[u][m] = t < n && sh.solve[t] ? sh.step[t] * q[u][m] : 0.0f;
        x_prev[u][m] = 0.0f;
      }
      Store4(sh.x + t * kStride + 4 * lane, x[u]);
      q_norm2[u] = WarpSum(q2);
      w_cheb[u] = 2.0f;
      relative[u] = 0.0f;
      active[u] = t < n && sh.solve[t];
      iterations[u] = 0;
      capped[u] = false;
    }
    for (int iteration = 0;; ++iteration) {
      bool mine = false;
#pragma unroll
      for (int u = 0; u < kTpw; ++u) mine |= active[u];
      if (!__syncthreads_or(mine)) break;  // x is in shared memory for everyone
      float y[kTpw][kColumns];             // Hs_t x_t
      ChunkProduct<P, kTpw, kTensorCores>(sh, sh.x, sh.hs, sh.key, n, base, first, warp, lane, y);
#pragma unroll
      for (int u = 0; u < kTpw; ++u) {
        const int t = first + u;
        if (!active[u]) continue;  // the same for the whole warp
        float res[kColumns], r2 = 0.0f;
#pragma unroll
        for (int m = 0; m < kColumns; ++m) {
          res[m] = y[u][m] + sh.lam[t] * x[u][m] - q[u][m];
          r2 += res[m] * res[m];
        }
        const bool last = iteration == max_iterations;
        if (tolerance > 0.0f || last) {
          const float res2 = WarpSum(r2);
          relative[u] = q_norm2[u] > 0.0f ? sqrtf(res2 / q_norm2[u]) : 0.0f;
          if (tolerance > 0.0f && res2 <= tolerance * tolerance * q_norm2[u]) {
            active[u] = false;
            continue;
          }
          if (last) {
            capped[u] = tolerance > 0.0f;
            active[u] = false;
            continue;
          }
        }
        w_cheb[u] = 1.0f / (1.0f - sh.r4[t] * w_cheb[u]);
#pragma unroll
        for (int m = 0; m < kColumns; ++m) {
          const float update = sh.step[t] * w_cheb[u] * res[m] + (w_cheb[u] - 1.0f) * x_prev[u][m];
          x_prev[u][m] = x[u][m];
          x[u][m] = w_cheb[u] * x[u][m] - update;
        }
        Store4(sh.x + t * kStride + 4 * lane, x[u]);
        iterations[u] = iteration + 1;
      }
    }

    // Readouts r_t = q + alpha (x - q) into x's place, then o_t = d^-0.5 Ss_t^T r_t.
#pragma unroll
    for (int u = 0; u < kTpw; ++u) {
      const int t = first + u;
      const float alpha = sh.alpha[t];
      float r[kColumns];
#pragma unroll
      for (int m = 0; m < kColumns; ++m) {
        r[m] = !a.solve      ? q[u][m]
               : sh.solve[t] ? q[u][m] + alpha * (x[u][m] - q[u][m])
                             : (1.0f - alpha) * q[u][m];
      }
      Store4(sh.x + t * kStride + 4 * lane, r);
      if (lane == 0) {
        sh.iterations[t] = iterations[u];
        sh.capped[t] = capped[u];
        sh.residual[t] = relative[u];
      }
    }
    __syncthreads();
    float o[kTpw][kColumns];  // Ss_t^T r_t
    ChunkProduct<P, kTpw, kTensorCores>(sh, sh.x, sh.ss, sh.value, n, base, first, warp, lane, o);
#pragma unroll
    for (int u = 0; u < kTpw; ++u) {
      const int t = first + u;
      float o2 = 0.0f;
#pragma unroll
      for (int m = 0; m < kColumns; ++m) {
        o[u][m] *= rsqrtf(static_cast<float>(D));
        o2 += o[u][m] * o[u][m];
      }
      const float norm = rsqrtf(WarpSum(o2) / D + a.norm_eps);
      if (t >= n) continue;
      const int64_t r = first_row + chunk_first + t;
      const float* proj = a.proj + r * a.proj_stride;
#pragma unroll
      for (int m = 0; m < kColumns; ++m) {
        const int j = 4 * lane + m;
        const float g = proj[a.g_column + head * D + j];
        static_cast<__nv_bfloat16*>(a.out_bf16)[r * a.out_stride + head * D + j] =
            __float2bfloat16(o[u][m] * norm * a.o_norm[j] * g * Sigmoid(g));
      }
    }
    __syncthreads();  // every read of Hs_0, Ss_0 and the chunk's rows is done

    // Hs and Ss to the chunk's end: g Hs_0 + sum_s w_s k~_s k~_s^T, likewise with v~. A thread
    // keeps its column j of the chunk's keys and values; the keys weighted by w_s,n-1 go into
    // q's place.
    const float end_scale = expf(sh.cumulative[n - 1]);
    for (int e = tid; e < kChunk * D; e += kThreads) {
      const int s = e / D, i = e % D;
      sh.query[s * kStride + i] =
          s < n ? sh.weight[s * kPairStride + n - 1] * sh.key[s * kStride + i] : 0.0f;
    }
    {
      const int j = tid % D;
      float key_j[kChunk], value_j[kChunk];
#pragma unroll
      for (int s = 0; s < kChunk; ++s) {
        key_j[s] = sh.key[s * kStride + j];
        value_j[s] = sh.value[s * kStride + j];
      }
      __syncthreads();
      for (int i = tid / D; i < D; i += kThreads / D) {
        float h = end_scale * sh.hs[i * D + j], s_ij = end_scale * sh.ss[i * D + j];
#pragma unroll
        for (int s = 0; s < kChunk; ++s) {
          const float weighted = sh.query[s * kStride + i];
          h += weighted * key_j[s];
          s_ij += weighted * value_j[s];
        }
        sh.hs[i * D + j] = h;
        sh.ss[i * D + j] = s_ij;
      }
    }
    if (tid == 0 && a.solve) {  // the block's tokens; the other blocks add theirs
      for (int t = base; t < min(n, base + kChunk / P); ++t) {
        if (P == 1) {
          a.counters[pair_index].Add(sh.iterations[t], sh.capped[t] != 0, sh.residual[t]);
        } else {
          a.counters[pair_index].AtomicAdd(sh.iterations[t], sh.capped[t] != 0, sh.residual[t]);
        }
      }
    }
    __syncthreads();
  }

  if (part != 0) return;  // every block holds the same state: the first writes it
  gka_internal::PackHs<D, kThreads>(sh.hs, hs_slot);
  for (int e = tid; e < D * D / 4; e += kThreads) {
    reinterpret_cast<float4*>(ss_slot)[e] = reinterpret_cast<const float4*>(sh.ss)[e];
  }
}

template <bool kTensorCores>
cudaError_t LaunchForBlocksPerHead(const GkaRecurrenceArgs& args, int items, cudaStream_t stream) {
  // Blocks a (sequence, head): as many (up to 4) as one wave of a block an SM holds.
  const int sm_count = args.sm_count;
  if (4 * items <= sm_count) {
    return LaunchWithDynamicSharedMemory(GkaChunkedPrefillKernel<4, kTensorCores>, 4 * items,
                                         kThreads, sizeof(ChunkShared), stream, args);
  }
  if (2 * items <= sm_count) {
    return LaunchWithDynamicSharedMemory(GkaChunkedPrefillKernel<2, kTensorCores>, 2 * items,
                                         kThreads, sizeof(ChunkShared), stream, args);
  }
  return LaunchWithDynamicSharedMemory(GkaChunkedPrefillKernel<1, kTensorCores>, items, kThreads,
                                       sizeof(ChunkShared), stream, args);
}

}  // namespace

bool GkaChunkedPrefillTakes(const GkaRecurrenceArgs& args) {
  return args.head_dim == D && args.max_tokens >= kChunkedFromTokens;
}

cudaError_t LaunchGkaChunkedPrefill(const GkaRecurrenceArgs& args, cudaStream_t stream) {
  const int items = args.num_sequences * args.heads;
  if (items == 0) return cudaSuccess;
  return args.tensor_core_products ? LaunchForBlocksPerHead<true>(args, items, stream)
                                   : LaunchForBlocksPerHead<false>(args, items, stream);
}

}  // namespace ridge::cuda
