#include <cuda_bf16.h>

#include "kernels/cuda/async_copy.h"
#include "kernels/cuda/dynamic_shared_memory.h"
#include "kernels/cuda/head_dim_dispatch.h"
#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/cuda/mesa_prefill_solve_common.h"
#include "kernels/cuda/tf32x3_mma.h"
#include "kernels/mesa_slot_layout.h"

namespace ridge::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kL2NormEps = 1e-6f;

// x sigmoid(x) with the fast reciprocal (2 ulp; 0 once 1 + e^-x passes 2^126, where the exact
// value is below fp32's normal range): IEEE division was a good part of Prepare's instructions.
__device__ __forceinline__ float Silu(float x) { return x * __fdividef(1.0f, 1.0f + __expf(-x)); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float* LayerBase(const MesaPrefillArgs& a, int j) {
  return a.state_pool + a.table.slot[j] * a.slot_floats + a.layer * a.layer_floats;
}

// ---------------------------------------------------------------------------------------------
// 1. Prepare: per (chunk, head). Threads [0, D) own q channel head*D + tid, [D, 2D) the k one.
// Tokens go in batches of kPrepareBatch: a batch's raw inputs are loaded at once and one
// barrier serves its norms. (A barrier and a dependent load per token made this kernel take
// 0.30 of a 0-iteration 140M prefill layer's 1.51 ms at 8 x 2048 on an H200.) Thread t < n
// also computes token t's gates.

constexpr int kPrepareBatch = 16;

// kConv: the conv size when known at compile time (the common 4: its taps and the window's shifts
// then need no predicates; ncu timed the generic kernel at 388 us a 1B layer at 8 x 2048), or 0
// for any size up to kMaxConvSize.
template <int D, int kConv>
__global__ void __launch_bounds__(kThreads) PrepareKernel(MesaPrefillArgs a) {
  constexpr int kTaps = kConv > 0 ? kConv : kMaxConvSize;
  constexpr int kVecWarps = D / 32;  // warps holding q (then as many holding k)
  __shared__ float sums[kPrepareBatch][kWarps];
  const int chunk = blockIdx.x / a.num_heads, head = blockIdx.x % a.num_heads;
  const int j = a.table.chunk_sequence[chunk];
  const int seq_begin = a.table.row_begin[j];
  const int first = seq_begin + (chunk - a.table.chunk_begin[j]) * kL;
  const int n = min(kL, seq_begin + a.table.row_count[j] - first);
  const int H = a.num_heads, K = H * D, W = kConv > 0 ? kConv : a.conv_size, tid = threadIdx.x;

  if (tid < n) {
    const int64_t row = first + tid;
    const float* pr = a.proj + row * a.proj_stride;
    const int a_col = DecayGateColumn(H, D, a.output_gate);
    const float ga = pr[a_col + head] + a.weights.a_bias[head];
    const float gb = pr[a_col + H + head] + a.weights.b_bias[head];
    // log(sigmoid(x)) = -softplus(-x), stable for both signs.
    a.log_gamma[row * H + head] = -(fmaxf(-ga, 0.0f) + log1pf(__expf(-fabsf(ga))));
    a.beta[row * H + head] = 1.0f / (1.0f + __expf(-gb));
  }

  const bool conv_thread = tid < 2 * D;  // head_dim 64 leaves half of the block idle here
  const int which = conv_thread ? tid / D : 0, channel = head * D + tid % D;
  const float* input = a.proj + which * K + channel;  // + row * proj_stride
  const float* weight = (which == 0 ? a.weights.q_conv : a.weights.k_conv) + channel * W;
  float w[kTaps];
#pragma unroll
  for (int i = 0; i < kTaps; ++i) w[i] = conv_thread && i < W ? weight[i] : 0.0f;
  // The W-1 raw inputs before the current token, oldest first; rows before the sequence come
  // from the slot's tail.
  float window[kTaps - 1];
  {
    const float* tail =
        LayerBase(a, j) + SlotTailsOffset(H, D) + static_cast<int64_t>(which) * (W - 1) * K;
#pragma unroll
    for (int i = 0; i < kTaps - 1; ++i) {
      const int src = first - (W - 1) + i;
      window[i] = !conv_thread || i >= W - 1 ? 0.0f
                  : src >= seq_begin
                      ? input[static_cast<int64_t>(src) * a.proj_stride]
                      : tail[static_cast<int64_t>(W - 1 + (src - seq_begin)) * K + channel];
    }
  }
  float* out = (which == 0 ? a.q_norm : a.k_norm) + channel;
  for (int t0 = 0; t0 < n; t0 += kPrepareBatch) {
    float raw[kPrepareBatch];
#pragma unroll
    for (int u = 0; u < kPrepareBatch; ++u) {
      raw[u] = conv_thread && t0 + u < n
                   ? input[static_cast<int64_t>(first + t0 + u) * a.proj_stride]
                   : 0.0f;
    }
    float v[kPrepareBatch];
#pragma unroll
    for (int u = 0; u < kPrepareBatch; ++u) {
      // Tap i reads the window for i < W-1 and the current token at i = W-1 (compile-time
      // indices only, so that window stays in registers).
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kTaps; ++i) {
        const float x = i < W - 1 ? window[i < kTaps - 1 ? i : 0] : raw[u];
        if (i < W) sum += w[i] * x;
      }
#pragma unroll
      for (int i = 0; i < kTaps - 1; ++i) {
        if (i < W - 2) {
          window[i] = window[i + 1 < kTaps - 1 ? i + 1 : i];
        } else if (i == W - 2) {
          window[i] = raw[u];
        }
      }
      v[u] = Silu(sum);
      const float sq = WarpSum(v[u] * v[u]);
      if ((tid & 31) == 0) sums[u][tid >> 5] = sq;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kPrepareBatch; ++u) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < kVecWarps; ++i) total += sums[u][which * kVecWarps + i];
      if (conv_thread && t0 + u < n) {
        out[static_cast<int64_t>(first + t0 + u) * K] = v[u] * rsqrtf(total + kL2NormEps);
      }
    }
    __syncthreads();  // sums is rewritten by the next batch
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Tails: per sequence, the last W-1 raw q/k projections of (old tail ++ prompt). A thread
// per channel (grid: sequences x blocks of kThreads channels), so that all of a step's loads are
// in flight at once. (A block a sequence, each thread looping over 12 of 1B's 3072 channels,
// took 11 us a layer for one prompt on an H200, 12 memory round trips.)

__global__ void TailsKernel(MesaPrefillArgs a) {
  const int j = blockIdx.x;
  const int H = a.num_heads, K = H * a.head_dim, W = a.conv_size;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int begin = a.table.row_begin[j], count = a.table.row_count[j];
  float* tails = LayerBase(a, j) + SlotTailsOffset(H, a.head_dim);
  if (c < 2 * K) {
    const int which = c / K, channel = c % K;
    float* tail = tails + static_cast<int64_t>(which) * (W - 1) * K;
    float next[kMaxConvSize - 1];
#pragma unroll
    for (int i = 0; i < kMaxConvSize - 1; ++i) {
      if (i >= W - 1) break;
      const int pos = count - (W - 1) + i;  // position in the prompt; < 0 reaches the old tail
      next[i] =
          pos >= 0 ? a.proj[static_cast<int64_t>(begin + pos) * a.proj_stride + which * K + channel]
                   : tail[static_cast<int64_t>(W - 1 + pos) * K + channel];
    }
#pragma unroll
    for (int i = 0; i < kMaxConvSize - 1; ++i) {
      if (i >= W - 1) break;
      tail[static_cast<int64_t>(i) * K + channel] = next[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Starting states: per (sequence, head, matrix, block of kStartRows rows), the slot's Hs
// (unpacked, mirrored blocks included) or Gs as the chunk-start state of the sequence's first
// chunk, [D, D] row-major. The chunk-state scan starts from there, never from the slot: its
// blocks write their rows' final state into the slot, and with Hs packed a block's rows hold the
// mirror of other blocks' lower-left entries, which those blocks, in a later wave, would
// otherwise read already overwritten. A thread copies one float4 of a row (at head_dim 128);
// a block a whole matrix, 64 float loads a thread in a loop, took 27 us a layer of a one-prompt
// step on an H200, a tenth of its mixer.

constexpr int kStartRows = 8;

template <int D>
__global__ void __launch_bounds__(kThreads) StartingStatesKernel(MesaPrefillArgs a) {
  constexpr int kGroups = D / 4;  // float4 column groups of a row
  int idx = blockIdx.x;
  const int row_block = idx % (D / kStartRows);
  idx /= D / kStartRows;
  const int matrix = idx % 2;  // 0: Hs, 1: Gs
  idx /= 2;
  const int head = idx % a.num_heads, j = idx / a.num_heads, H = a.num_heads;
  if (a.table.row_count[j] == 0) return;
  const float* state =
      LayerBase(a, j) + (matrix == 0 ? SlotHsOffset(D, head) : SlotGsOffset(H, D, head));
  float4* out = reinterpret_cast<float4*>(ChunkState<D>(a, a.table.chunk_begin[j], head, matrix));
  for (int i = threadIdx.x; i < kStartRows * kGroups; i += kThreads) {
    const int row = row_block * kStartRows + i / kGroups, group = i % kGroups;
    float4 v;
    if (matrix == 1) {
      v = reinterpret_cast<const float4*>(state)[row * kGroups + group];
    } else if (group >= row / 4) {  // on or above the diagonal blocks: stored as it is
      v = *reinterpret_cast<const float4*>(state + PackedHsOffset(D, row, group));
    } else {  // the mirror: column `row` of the stored block-row `group`
      v = make_float4(state[PackedHsElement(D, 4 * group, row)],
                      state[PackedHsElement(D, 4 * group + 1, row)],
                      state[PackedHsElement(D, 4 * group + 2, row)],
                      state[PackedHsElement(D, 4 * group + 3, row)]);
    }
    out[row * kGroups + group] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Chunk-start states: per (sequence, head, matrix, block of BlockRows rows), on the tensor
// cores (3xTF32, about fp32 accuracy). Across a chunk of n tokens
//   m <- exp(G_n) m + sum_t beta_t exp(G_n - G_t) k_t x_t^T,
// G_t the log decays summed through token t and x_t = k_t (Hs) or v_t (Gs): the block's rows of
// m gain (W K)^T X, W the tokens' weights, K the chunk's k values at the block's rows (64 x
// BlockRows) and X its x rows (64 x D). Warp w keeps m's 16 x 8 tiles (m tiles of the half w % 2
// of the rows, n tiles kTilesN (w / 2) + j) in mma accumulators for the whole sequence. A chunk's
// rows arrive by cp.async into row-major tiles whose padded strides put the 32 lanes of every
// fragment load in 32 banks.
// (The fp32 FMA version before it, a thread owning 4 rows of a float4 column group, took 297 us
// of a 140M prefill layer at 8 x 2048 on an H200, 16 FMAs and two shared loads a token and
// thread; this one made the 0-iteration layer 0.88 -> 0.83 ms. What is left is mostly the chain
// of 32 chunks, each waiting for its rows: so a launch whose blocks of 32 rows would not all fit
// the SMs at once takes blocks of 64 rows instead (PickChunkStateRows), one round of chains
// instead of two.)

constexpr int kChunkStateBlocksPerSm = 3;  // ChunkStatesKernel's launch bounds

template <int D, int BlockRows>
struct ChunkStatesLayout {
  static constexpr int kKStride = BlockRows + 8, kXStride = D + 8;  // floats: 8 (mod 32) apart
  static constexpr int kKRows = 0;                                  // k_t at the block's rows
  static constexpr int kXRows = kKRows + kL * kKStride;             // x_t, all columns
  static constexpr int kWeight = kXRows + kL * kXStride;            // the tokens' weights W
  static constexpr int kDecay = kWeight + kL;                       // exp(G_n)
  static constexpr int kTotal = kDecay + 4;
  static_assert(kKStride % 32 == 8 && kXStride % 32 == 8 && kXRows % 4 == 0, "padded strides");
};

template <int D, int BlockRows>
__global__ void __launch_bounds__(kThreads, kChunkStateBlocksPerSm)
    ChunkStatesKernel(MesaPrefillArgs a) {
  using Lo = ChunkStatesLayout<D, BlockRows>;
  constexpr int kKStride = Lo::kKStride, kXStride = Lo::kXStride;
  constexpr int kMTiles = BlockRows / 32;        // m tiles a warp: its half of the rows
  constexpr int kTilesN = D / 8 / (kWarps / 2);  // n tiles a warp
  static_assert(kWarps % 2 == 0 && BlockRows % 32 == 0 && kTilesN * 8 * (kWarps / 2) == D,
                "the m tiles split over two halves of the warps, the n tiles over the rest");
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* k_rows = smem + Lo::kKRows;
  float* x_rows = smem + Lo::kXRows;
  float* weight = smem + Lo::kWeight;
  float* chunk_decay = smem + Lo::kDecay;
  int idx = blockIdx.x;
  const int row_block = idx % (D / BlockRows);
  idx /= D / BlockRows;
  const int matrix = idx % 2;  // 0: Hs, 1: Gs
  idx /= 2;
  const int head = idx % a.num_heads, j = idx / a.num_heads;
  const int H = a.num_heads, K = H * D, tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int n_tile0 = (warp / 2) * kTilesN;
  const int begin = a.table.row_begin[j], count = a.table.row_count[j];
  if (count == 0) return;
  // The block-local row of this warp's m tile mi (its first 16 rows: 16 m_tile .. + 15).
  auto m_tile = [&](int mi) { return (warp % 2) * kMTiles + mi; };
  // This thread's accumulator elements of m tile mi: rows row_lo(mi) and row_lo(mi) + 8, columns
  // col(jt), col(jt) + 1.
  auto row_lo = [&](int mi) { return row_block * BlockRows + 16 * m_tile(mi) + g; };
  auto col = [&](int jt) { return 8 * (n_tile0 + jt) + 2 * t4; };
  // The starting state, unpacked by StartingStatesKernel into the first chunk's entry.
  float acc[kMTiles][kTilesN][4];
  {
    const float* start_state = ChunkState<D>(a, a.table.chunk_begin[j], head, matrix);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int jt = 0; jt < kTilesN; ++jt) {
        const float* at = start_state + row_lo(mi) * D + col(jt);
        const float2 lo = *reinterpret_cast<const float2*>(at);
        const float2 hi = *reinterpret_cast<const float2*>(at + 8 * D);
        acc[mi][jt][0] = lo.x, acc[mi][jt][1] = lo.y, acc[mi][jt][2] = hi.x, acc[mi][jt][3] = hi.y;
      }
    }
  }
  const float* x_src = matrix == 0 ? a.k_norm : a.proj;
  const int x_stride = matrix == 0 ? K : a.proj_stride;
  const int x_offset = matrix == 0 ? head * D : 2 * K + head * D;
  for (int start = 0, chunk = a.table.chunk_begin[j]; start < count; start += kL, ++chunk) {
    float* out = ChunkState<D>(a, chunk, head, matrix);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int jt = 0; jt < kTilesN; ++jt) {
        float* at = out + row_lo(mi) * D + col(jt);
        *reinterpret_cast<float2*>(at) = make_float2(acc[mi][jt][0], acc[mi][jt][1]);
        *reinterpret_cast<float2*>(at + 8 * D) = make_float2(acc[mi][jt][2], acc[mi][jt][3]);
      }
    }
    const int n = min(kL, count - start);
    const int64_t first = begin + start;
    __syncthreads();  // the previous chunk's tiles are consumed
    CopyRowsAsync<D>(x_rows, kXStride, x_src + first * x_stride + x_offset, x_stride, n);
    CopyRowsAsync<BlockRows>(k_rows, kKStride,
                             a.k_norm + first * K + head * D + row_block * BlockRows, K, n);
    __pipeline_commit();
    for (int i = n * kXStride + tid; i < kL * kXStride; i += kThreads) x_rows[i] = 0.0f;
    for (int i = n * kKStride + tid; i < kL * kKStride; i += kThreads) k_rows[i] = 0.0f;
    if (warp == 0) {
      // Token t's decay to the chunk's end, exp(G_n - G_t), from the sum of the later tokens' log
      // decays (a suffix scan, lane l holding tokens l and l + 32), not from the difference of
      // two prefix sums: the weights that matter, the late tokens', are then sums of few terms.
      const float d_lo = lane < n ? a.log_gamma[(first + lane) * H + head] : 0.0f;
      const float d_hi = lane + 32 < n ? a.log_gamma[(first + lane + 32) * H + head] : 0.0f;
      float s_lo = d_lo, s_hi = d_hi;  // sums over lanes >= this one
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const float down_lo = __shfl_down_sync(0xffffffffu, s_lo, offset);
        const float down_hi = __shfl_down_sync(0xffffffffu, s_hi, offset);
        if (lane + offset < 32) s_lo += down_lo, s_hi += down_hi;
      }
      const float hi_total = __shfl_sync(0xffffffffu, s_hi, 0);
      s_lo += hi_total;
      float later_lo = __shfl_down_sync(0xffffffffu, s_lo, 1);  // the tokens after this one
      float later_hi = __shfl_down_sync(0xffffffffu, s_hi, 1);
      if (lane == 31) later_lo = hi_total, later_hi = 0.0f;
      weight[lane] = lane < n ? a.beta[(first + lane) * H + head] * expf(later_lo) : 0.0f;
      weight[lane + 32] =
          lane + 32 < n ? a.beta[(first + lane + 32) * H + head] * expf(later_hi) : 0.0f;
      if (lane == 0) *chunk_decay = expf(s_lo);
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    const float decay = *chunk_decay;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int jt = 0; jt < kTilesN; ++jt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][jt][e] *= decay;
      }
    }
#pragma unroll 2
    for (int k0 = 0; k0 < kL; k0 += 8) {
      // A = (W K)^T: element (row r, token k) is weight[k] k_rows[k][r].
      const float w_lo = weight[k0 + t4], w_hi = weight[k0 + t4 + 4];
      FragmentA fa[kMTiles];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const float* k_lo = k_rows + (k0 + t4) * kKStride + 16 * m_tile(mi) + g;
        const float* k_hi = k_lo + 4 * kKStride;
        SplitInto(w_lo * k_lo[0], fa[mi].hi[0], fa[mi].lo[0]);
        SplitInto(w_lo * k_lo[8], fa[mi].hi[1], fa[mi].lo[1]);
        SplitInto(w_hi * k_hi[0], fa[mi].hi[2], fa[mi].lo[2]);
        SplitInto(w_hi * k_hi[8], fa[mi].hi[3], fa[mi].lo[3]);
      }
      const float* x_lo = x_rows + (k0 + t4) * kXStride + 8 * n_tile0 + g;
#pragma unroll
      for (int jt = 0; jt < kTilesN; ++jt) {
        FragmentB fb;
        SplitInto(x_lo[8 * jt], fb.hi[0], fb.lo[0]);
        SplitInto(x_lo[8 * jt + 4 * kXStride], fb.hi[1], fb.lo[1]);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) MmaTf32x3(acc[mi][jt], fa[mi], fb);
      }
    }
  }
  // The final state goes to the slot: Gs whole, Hs packed to its upper 4x4 blocks
  // (kernels/mesa_slot_layout.h), so column groups left of a row's diagonal block are not stored
  // (their mirror is, by the thread owning those rows). A pair of columns 2 t4, 2 t4 + 1 lies in
  // one group of 4.
  float* state = LayerBase(a, j) + (matrix == 0 ? SlotHsOffset(D, head) : SlotGsOffset(H, D, head));
  auto store = [&](int row, int c, float v0, float v1) {
    if (matrix == 0 && c / 4 < row / 4) return;
    const int at = matrix == 0 ? PackedHsOffset(D, row, c / 4) + c % 4 : row * D + c;
    *reinterpret_cast<float2*>(state + at) = make_float2(v0, v1);
  };
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int jt = 0; jt < kTilesN; ++jt) {
      store(row_lo(mi), col(jt), acc[mi][jt][0], acc[mi][jt][1]);
      store(row_lo(mi) + 8, col(jt), acc[mi][jt][2], acc[mi][jt][3]);
    }
  }
}

template <int D, int BlockRows>
cudaError_t LaunchChunkStates(const MesaPrefillArgs& a, cudaStream_t stream) {
  const int blocks = a.table.num_sequences * a.num_heads * 2 * (D / BlockRows);
  return LaunchWithDynamicSharedMemory(
      ChunkStatesKernel<D, BlockRows>, dim3(blocks), dim3(kThreads),
      ChunkStatesLayout<D, BlockRows>::kTotal * sizeof(float), stream, a);
}

// ---------------------------------------------------------------------------------------------
// 5. Solve and readout: per (chunk, head, slice of its tokens). Every product of the solve runs on
// the tensor cores as 3xTF32 (tf32x3_mma.h, about fp32 accuracy; the late iterations of a
// tolerance-0 solve in one f16 pass, here or in kernels/cuda/mesa_half_solve.cu, see LatePhase)
// from operands kept in shared memory in fragment order. One
// CG product A p_t for all tokens of the chunk is
//   y_t = exp(G_t) Hs_c p_t + sum_{s<=t} beta_s exp(G_t - G_s) k_s (k_s . p_t) + lambda p_t,
// taken as S = P K^T scaled by the intra-chunk weights W[t][s] in registers and stored, and
// Y = decay * (P Hs_c) kept in registers (with whole chunks both in one pass over P, each of its
// fragments loaded and split once: a CG iteration 4% faster), after one barrier Y += S V (V = K),
// and Y stored for the CG update.
//
// The tokens' CGs share only Hs_c and the keys, so a block may take a slice of the chunk's rows:
// Rows tokens (64, 32 or 16), kL / Rows blocks a (chunk, head). A whole chunk a block keeps the
// tensor cores of one SM busy for about 10 us a CG iteration (one block an SM: 210 KB of shared
// memory), which is the right shape when the launch has many waves (long prompts); a step with
// few or short prompts (beside decoding sequences) would leave most SMs idle for 30 such
// iterations a layer, so it runs its chunks in slices over more SMs (PickSolveRows). On an H200
// (140M) a slice of 16 tokens takes 3.6 us a CG iteration, against 10.7 for a whole chunk.

template <int D, int Rows>
struct SolveLayout {
  static constexpr int kLdY = D + 4;           // padded row stride of Y
  static constexpr int kMat = 0;               // Hs_c, later Gs_c: B operand [D, D], fragment order
  static constexpr int kKeysT = kMat + D * D;  // K^T as the B operand of P K^T: [D, kL]
  static constexpr int kKeys = kKeysT + kL * D;  // K, later V, as the B operand of S K: [kL, D]
  static constexpr int kP = kKeys + kL * D;      // P, later X: A operand [Rows, D], fragment order
  static constexpr int kY = kP + Rows * D;       // products, row-major [Rows, kLdY]
  static constexpr int kS = kY + Rows * kLdY;    // weighted P K^T: A operand [Rows, kL]
  static constexpr int kG = kS + Rows * kL;      // cumulative log decay [L]
  static constexpr int kBeta = kG + kL;          // [L]
  static constexpr int kTotal = kBeta + kL;
};

// Issues the copies of rows [0, n) of a [*, Cols] matrix from global memory (rows `stride`
// floats apart) into fragment order, each element by a 4-byte cp.async to `offset(r, c)`; rows
// [n, Rows) are zeroed.
template <int Rows, int Cols, typename Offset>
__device__ __forceinline__ void CopyPermutedAsync(float* dst, const float* src, int64_t stride,
                                                  int n, Offset offset) {
  for (int i = threadIdx.x; i < Rows * Cols; i += kThreads) {
    const int r = i / Cols, c = i % Cols;
    if (r < n) {
      __pipeline_memcpy_async(dst + offset(r, c), src + r * stride + c, 4);
    } else {
      dst[offset(r, c)] = 0.0f;
    }
  }
}

// Copies of a chunk's keys for the two products they enter: K^T as the B operand of P K^T, and
// K (or the values) as the B operand of S K.
template <int D>
__device__ __forceinline__ void CopyKeysTransposedAsync(float* keys_t, const float* src,
                                                        int64_t stride, int n) {
  CopyPermutedAsync<kL, D>(keys_t, src, stride, n,
                           [](int s, int c) { return BPermOffset(c, s, kL); });
}
template <int D>
__device__ __forceinline__ void CopyKeysAsync(float* keys, const float* src, int64_t stride,
                                              int n) {
  CopyPermutedAsync<kL, D>(keys, src, stride, n, [](int s, int c) { return BPermOffset(s, c, D); });
}

// Writes a [KRows, Cols] B operand in f16 fragment order (BHalfOffset) to dst, a word (elements
// (k, n) and (k + 1, n)) at a time, taking element (k, n) from element(k, n).
template <int KRows, int Cols, typename Element>
__device__ __forceinline__ void StoreHalfOperandB(uint32_t* dst, Element element) {
  static_assert(KRows % 16 == 0 && Cols % 8 == 0, "whole 16 x 8 tiles");
#pragma unroll 1  // once a solve, where registers are short
  for (int word = threadIdx.x; word < KRows * Cols / 2; word += kThreads) {
    const OperandElement e = BHalfWordElement(word, Cols);
    dst[word] = PackHalves(element(e.k, e.n), element(e.k + 1, e.n));
  }
}

// The largest |element| of the first N floats of shared memory at v (16-byte aligned), for every
// thread of the block; `scratch` holds kWarps floats, free until the block's next barrier.
template <int N>
__device__ __forceinline__ float BlockMaxAbs(const float* v, float* scratch) {
  static_assert(N % (4 * kThreads) == 0, "whole float4s for every thread");
  float m = 0.0f;
#pragma unroll 1
  for (int i = threadIdx.x; i < N / 4; i += kThreads) {
    const float4 x = reinterpret_cast<const float4*>(v)[i];
    m = fmaxf(m, fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = m;
  __syncthreads();
  m = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) m = fmaxf(m, scratch[i]);
  return m;
}

// The warps split the block's rows in kRowGroups and the columns in kColGroups: a warp owns
// kTilesM x kTilesN of Y's 16 x 8 tiles and kTilesM x kSTilesN of S's.
template <int D, int Rows>
struct SolveWarpTiles {
  static constexpr int kDTiles = D / 8;  // tiles along a head vector
  static constexpr int kRowTiles = Rows / 16;
  static constexpr int kRowGroups = kRowTiles >= 2 ? 2 : 1;
  static constexpr int kColGroups = kWarps / kRowGroups;
  static constexpr int kTilesM = kRowTiles / kRowGroups;  // row tiles per warp
  static constexpr int kTilesN = kDTiles / kColGroups;    // Y column tiles per warp
  static constexpr int kSTilesN = kL / 8 / kColGroups;    // S column tiles per warp
  static_assert(kTilesM * kRowGroups == kRowTiles && kTilesN * kColGroups == kDTiles &&
                    kSTilesN * kColGroups * 8 == kL,
                "the warps must tile Y and S exactly");
  int m0;    // first of the warp's row tiles (of 16), in the block's rows
  int n0;    // first of its Y column tiles (of 8)
  int s_n0;  // first of its S column tiles
  int row0;  // the chunk row of the block's first token
  __device__ explicit SolveWarpTiles(int first_row) : row0(first_row) {
    const int warp = threadIdx.x >> 5;
    m0 = kTilesM * (warp / kColGroups);  // warps w and w + 4 share a tensor core: one of
    n0 = kTilesN * (warp % kColGroups);  // each row group (see IntraChunkProduct)
    s_n0 = kSTilesN * (warp % kColGroups);
  }
};

// Accumulators a warp keeps in flight: a product whose warp owns fewer tiles (a sliced solve)
// accumulates alternate k-steps into separate chains, so that its MMAs do not all wait on one
// another (each tile's k-steps otherwise form one chain of 3 dependent MMAs a step).
constexpr int kMinChains = 4;

// acc[i][j] += A's row of tiles m0 + i times B's column of tiles n0 + j, both in fragment order,
// over the first kSteps k-steps of kMmaK<kHalf> (A has kATiles tiles a row of tiles, B
// b_tiles_per_row). kHalf: one f16 pass instead of 3xTF32 (MmaPass), as in all the products
// below; kExactA: A's elements are TF32 values (MmaPass).
template <bool kHalf, int kTilesM, int kTilesN, int kSteps, int kUnroll, int kATiles = kSteps,
          bool kExactA = false>
__device__ __forceinline__ void AccumulateTiles(const float* a, int m0, const float* b,
                                                int b_tiles_per_row, int n0,
                                                float (&acc)[kTilesM][kTilesN][4]) {
  constexpr int kTiles = kTilesM * kTilesN;
  constexpr int kWanted = kTiles >= kMinChains ? 1 : kMinChains / kTiles;  // 1, 2 or 4
  constexpr int kChains = kSteps % kWanted == 0 ? kWanted : kSteps % 2 == 0 ? 2 : 1;
  float more[kChains > 1 ? kChains - 1 : 1][kTilesM][kTilesN][4] = {};  // chains 1, 2, ...
#pragma unroll kUnroll
  for (int k0 = 0; k0 < kSteps; k0 += kChains) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      const int k = k0 + c;
      FragmentA fa[kTilesM];
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) {
        fa[i] = LoadFragmentA<(kHalf || kExactA)>(a, (m0 + i) * kATiles + k);
      }
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
        const FragmentB fb = LoadFragmentB<kHalf>(b, k * b_tiles_per_row + n0 + j);
#pragma unroll
        for (int i = 0; i < kTilesM; ++i) {
          MmaPass<kHalf, kExactA>(c == 0 ? acc[i][j] : more[c > 0 ? c - 1 : 0][i][j], fa[i], fb);
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c + 1 < kChains; ++c) {
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += more[c][i][j][e];
      }
    }
  }
}

// S = (P K^T) * W in the warp's tiles of S, stored in fragment order. W[t][s] = beta_s
// exp(G_t - G_s) for s <= t, else 0.
template <typename Tiles>
using STiles = float[Tiles::kTilesM][Tiles::kSTilesN][4];
template <typename Tiles>
using YTiles = float[Tiles::kTilesM][Tiles::kTilesN][4];

// S = acc * W stored in fragment order (f16's when kHalf), acc = P K^T in the warp's tiles of S.
// In fp32, elements e and e + 2 of a tile are rows r and r + 8 of one column, adjacent in fragment
// order: one float2 store; in f16 a tile's four elements are one 8-byte store. The weights are
// computed without branches: exp of min(G_t - G_u, 0) (G falls along the chunk, so only
// masked-out u > t would exceed 0) and a select.
template <bool kHalf, typename Tiles>
__device__ __forceinline__ void StoreWeightedKeys(const Tiles& w, const STiles<Tiles>& acc,
                                                  const float* g, const float* beta, float* s) {
  constexpr int kTilesM = Tiles::kTilesM, kSTilesN = Tiles::kSTilesN;
  const int lane = threadIdx.x & 31, gr = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
    const int local = 16 * (w.m0 + i) + gr, t = w.row0 + local;
    const float g_upper = g[t], g_lower = g[t + 8];
#pragma unroll
    for (int j = 0; j < kSTilesN; ++j) {
      float weighted[4];  // acc's order: (r, u), (r, u + 1), (r + 8, u), (r + 8, u + 1)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int u = 8 * (w.s_n0 + j) + 2 * q + e;
        const float b = beta[u], gu = g[u];
        const float upper = u <= t ? b * __expf(fminf(g_upper - gu, 0.0f)) : 0.0f;
        const float lower = u <= t + 8 ? b * __expf(fminf(g_lower - gu, 0.0f)) : 0.0f;
        weighted[e] = acc[i][j][e] * upper;
        weighted[e + 2] = acc[i][j][e + 2] * lower;
        if constexpr (!kHalf) {
          *reinterpret_cast<float2*>(s + APermOffset(local, u, kL)) =
              make_float2(weighted[e], weighted[e + 2]);
        }
      }
      if constexpr (kHalf) {  // (r, u..u+1) and (r + 8, u..u+1) are consecutive words
        const int u = 8 * (w.s_n0 + j) + 2 * q;
        *reinterpret_cast<uint2*>(s + AHalfOffset(local, u, kL) / 2) =
            make_uint2(PackHalves(weighted[0], weighted[1]), PackHalves(weighted[2], weighted[3]));
      }
    }
  }
}

// acc *= decay_t * factor in the warp's tiles of Y.
template <typename Tiles>
__device__ __forceinline__ void ScaleByDecay(const Tiles& w, const float* g, float factor,
                                             YTiles<Tiles>& acc) {
  constexpr int kTilesM = Tiles::kTilesM, kTilesN = Tiles::kTilesN;
  const int gr = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
    const float upper = factor * __expf(g[w.row0 + 16 * (w.m0 + i) + gr]),
                lower = factor * __expf(g[w.row0 + 16 * (w.m0 + i) + gr + 8]);
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      acc[i][j][0] *= upper, acc[i][j][1] *= upper, acc[i][j][2] *= lower, acc[i][j][3] *= lower;
    }
  }
}

// acc += S V in the warp's tiles of Y, then Y stored row-major (rows LdY floats apart). S is
// lower triangular (W[t][s] = 0 for s > t), so with whole chunks the first half of the rows
// needs only the first half of the keys: those warps skip the other k-steps, and since each
// tensor core hosts one warp of each half, every one does a quarter less of this product.
template <bool kHalf, typename Tiles, int LdY>
__device__ __forceinline__ void IntraChunkProduct(const Tiles& w, const float* s, const float* v,
                                                  YTiles<Tiles>& acc, float* y) {
  constexpr int kTilesM = Tiles::kTilesM, kTilesN = Tiles::kTilesN;
  constexpr int kSteps = kL / kMmaK<kHalf>;
  if (Tiles::kRowTiles == kL / 16 && Tiles::kRowGroups == 2 && w.m0 == 0) {
    AccumulateTiles<kHalf, kTilesM, kTilesN, kSteps / 2, 2, kSteps>(s, w.m0, v, Tiles::kDTiles,
                                                                    w.n0, acc);
  } else {
    AccumulateTiles<kHalf, kTilesM, kTilesN, kSteps, 2>(s, w.m0, v, Tiles::kDTiles, w.n0, acc);
  }
  const int lane = threadIdx.x & 31, gr = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
      float* at = y + (16 * (w.m0 + i) + gr) * LdY + 8 * (w.n0 + j) + 2 * q;
      *reinterpret_cast<float2*>(at) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(at + 8 * LdY) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
  }
}

// s_acc = X K^T and y_acc = X M over D in one pass, each A fragment of X loaded and split once
// for both (kExactX: X's elements are TF32 values, not split).
template <bool kHalf, bool kExactX, typename Tiles>
__device__ __forceinline__ void BothProductsOfX(const Tiles& w, const float* x, const float* keys_t,
                                                const float* m, STiles<Tiles>& s_acc,
                                                YTiles<Tiles>& y_acc) {
  constexpr int kTilesM = Tiles::kTilesM, kDTiles = Tiles::kDTiles;
  constexpr int kSteps = 8 * kDTiles / kMmaK<kHalf>;  // k-steps along a head vector
#pragma unroll 2
  for (int k = 0; k < kSteps; ++k) {
    FragmentA fa[kTilesM];
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
      fa[i] = LoadFragmentA<(kHalf || kExactX)>(x, (w.m0 + i) * kSteps + k);
    }
#pragma unroll
    for (int j = 0; j < Tiles::kSTilesN; ++j) {
      const FragmentB fb = LoadFragmentB<kHalf>(keys_t, k * (kL / 8) + w.s_n0 + j);
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) MmaPass<kHalf, kExactX>(s_acc[i][j], fa[i], fb);
    }
#pragma unroll
    for (int j = 0; j < Tiles::kTilesN; ++j) {
      const FragmentB fb = LoadFragmentB<kHalf>(m, k * kDTiles + w.n0 + j);
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) MmaPass<kHalf, kExactX>(y_acc[i][j], fa[i], fb);
    }
  }
}

// Y = A X for the block's tokens (X in fragment order in x): three products and two barriers;
// on return Y is published. The caller has published X, and the matrices. m_factor undoes a
// scale of m (f16 products: Hs_c scaled into f16's range). kExactX: X's elements are TF32
// values, which takes its two products in two passes instead of three.
template <int LdY, bool kHalf, bool kExactX = false, typename Tiles>
__device__ __forceinline__ void ChunkProduct(const Tiles& w, const float* x, const float* m,
                                             float m_factor, const float* keys_t, const float* keys,
                                             const float* g, const float* beta, float* s,
                                             float* y) {
  constexpr int kDSteps = 8 * Tiles::kDTiles / kMmaK<kHalf>;  // k-steps along a head vector
  YTiles<Tiles> acc = {};
  if constexpr (Tiles::kTilesM * Tiles::kSTilesN >= kMinChains) {
    STiles<Tiles> s_acc = {};
    BothProductsOfX<kHalf, kExactX>(w, x, keys_t, m, s_acc, acc);
    StoreWeightedKeys<kHalf>(w, s_acc, g, beta, s);
  } else {  // few tiles a warp: each product in turn, in its own accumulator chains
    {
      STiles<Tiles> s_acc = {};
      AccumulateTiles<kHalf, Tiles::kTilesM, Tiles::kSTilesN, kDSteps, 4, kDSteps, kExactX>(
          x, w.m0, keys_t, kL / 8, w.s_n0, s_acc);
      StoreWeightedKeys<kHalf>(w, s_acc, g, beta, s);
    }
    AccumulateTiles<kHalf, Tiles::kTilesM, Tiles::kTilesN, kDSteps, 2, kDSteps, kExactX>(
        x, w.m0, m, Tiles::kDTiles, w.n0, acc);
  }
  ScaleByDecay(w, g, m_factor, acc);
  __syncthreads();  // S published
  IntraChunkProduct<kHalf, Tiles, LdY>(w, s, keys, acc, y);
  __syncthreads();  // Y published
}

// Readout o_t = exp(G_t) Gs_c^T x_t + sum_{s<=t} exp(G_t - G_s) beta_s v_s (k_s . x_t) of the
// block's tokens from x (the thread's columns of its token): the CG product's form with Gs_c for
// Hs_c, values for keys (in the second product), X for P. Every earlier read of the operand
// regions came before a barrier, so Gs_c and the values replace Hs_c and the keys' second copy,
// and K^T is copied again when reload_keys_t (its region held f16 operands, or nothing). Gs is
// stored [key, value]: o = Gs^T x is x^T Gs, the same product. Then the per-head RMSNorm with the
// shared weight, the optional gate, bf16 out.
template <int D, int Rows>
__device__ __forceinline__ void Readout(const MesaPrefillArgs& a, float* smem, int chunk, int head,
                                        int first, int n, int row0,
                                        const float (&x)[D / (kThreads / Rows)],
                                        bool reload_keys_t) {
  using Lo = SolveLayout<D, Rows>;
  constexpr int kLanes = kThreads / Rows, kCols = D / kLanes;
  float* mat = smem + Lo::kMat;
  float* keys_t = smem + Lo::kKeysT;
  float* keys = smem + Lo::kKeys;
  float* p_s = smem + Lo::kP;
  float* y_s = smem + Lo::kY;
  const int K = a.num_heads * D, tid = threadIdx.x;
  const int local = tid / kLanes, c0 = tid % kLanes, t = row0 + local;
  const int64_t row = first + t;
  const SolveWarpTiles<D, Rows> tiles(row0);
  auto state_offset = [](int k, int c) { return BPermOffset(k, c, D); };
  CopyPermutedAsync<D, D>(mat, ChunkState<D>(a, chunk, head, 1), D, D, state_offset);
  CopyKeysAsync<D>(keys, a.proj + static_cast<int64_t>(first) * a.proj_stride + 2 * K + head * D,
                   a.proj_stride, n);
  if (reload_keys_t) {
    CopyKeysTransposedAsync<D>(keys_t, a.k_norm + static_cast<int64_t>(first) * K + head * D, K, n);
  }
  __pipeline_commit();
  const int p_base = APermOffset(local, c0, D);
#pragma unroll
  for (int c = 0; c < kCols; ++c) p_s[p_base + APermOffset(0, kLanes * c, D)] = x[c];
  __pipeline_wait_prior(0);
  __syncthreads();
  ChunkProduct<Lo::kLdY, false>(tiles, p_s, mat, 1.0f, keys_t, keys, smem + Lo::kG,
                                smem + Lo::kBeta, smem + Lo::kS, y_s);

  float o[kCols], sum_sq = 0.0f;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    o[c] = y_s[local * Lo::kLdY + c0 + kLanes * c];
    sum_sq += o[c] * o[c];
  }
  const float scale = rsqrtf(RowSum<kLanes>(sum_sq) / D + a.norm_eps);
  if (t < n) {
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out_bf16) + row * K + head * D + c0;
    const float* gate = a.proj + row * a.proj_stride + 3 * K + head * D + c0;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float v = o[c] * scale * a.weights.o_norm[c0 + kLanes * c];
      if (a.output_gate) v *= Silu(gate[kLanes * c]);
      out[kLanes * c] = __float2bfloat16(v);
    }
  }
}

// What a tolerance-0 solve does once its residuals are small (see single_pass_residual below):
// kNone, nothing (a step without tolerance-0 prompts: the f16 phase's registers slow the 3xTF32
// iterations, 119.6 against 110.6 us a 140M layer at 8 x 2048 on an H200); kInPlace, converts its
// operands to f16 in place and goes on (slices, and whole chunks too few to fill the SMs, see
// PrefillHandsOff); kHandOff, passes its CG to the f16 solve kernel through the hand-off record
// and leaves the readout to ReadoutKernel (whole chunks: kernels/cuda/mesa_half_solve.cu).
enum class LatePhase { kNone, kInPlace, kHandOff };

template <int D, int Rows, LatePhase kLate>
__global__ void __launch_bounds__(kThreads, 1) SolveKernel(MesaPrefillArgs a) {
  using Lo = SolveLayout<D, Rows>;
  constexpr int kLanes = kThreads / Rows;  // threads of a token
  constexpr int kCols = D / kLanes;        // columns per thread
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* mat = smem + Lo::kMat;
  float* keys_t = smem + Lo::kKeysT;
  float* keys = smem + Lo::kKeys;
  float* p_s = smem + Lo::kP;
  float* y_s = smem + Lo::kY;
  float* s_s = smem + Lo::kS;
  float* g_s = smem + Lo::kG;
  float* beta_s = smem + Lo::kBeta;

  constexpr int kSlices = kL / Rows;
  const int slice = blockIdx.x % kSlices;
  const int chunk = blockIdx.x / kSlices / a.num_heads, head = blockIdx.x / kSlices % a.num_heads;
  const ChunkTokens tokens = LocateChunk(a, chunk);
  const int j = tokens.sequence, first = tokens.first, n = tokens.count;
  const int row0 = slice * Rows;  // the chunk row of the block's first token
  if (row0 >= n) return;          // a slice past the prompt's end
  const int H = a.num_heads, K = H * D, tid = threadIdx.x;
  // Token t = row0 + local lives in kLanes consecutive lanes; lane c0 of them owns columns c0,
  // c0 + kLanes, ... (interleaved, so the lanes of a warp read distinct shared-memory banks).
  const int local = tid / kLanes, c0 = tid % kLanes, t = row0 + local;
  const int64_t row = first + t;
  const float tolerance = a.table.tolerance[j];
  const int max_iterations = a.table.max_iterations[j];
  const SolveWarpTiles<D, Rows> tiles(row0);
  auto state_offset = [](int k, int c) { return BPermOffset(k, c, D); };
  // Column c0 + kLanes c, with c0 < kLanes a power of two >= 4, sets bits of the column that
  // c0 leaves clear, and APermOffset adds over such disjoint bits: the thread's offset plus a
  // constant per c (computing each in full was about 350 instructions a warp per CG iteration).
  const int p_base = APermOffset(local, c0, D);
  auto p_at = [&](int c) { return p_base + APermOffset(0, kLanes * c, D); };
  static_assert(kLanes >= 4 && (kLanes & (kLanes - 1)) == 0, "p_at needs kLanes a power of 2");

  // Hs_c and the keys arrive while the decays and the CG start are computed (waited for
  // before the first product).
  CopyPermutedAsync<D, D>(mat, ChunkState<D>(a, chunk, head, 0), D, D, state_offset);
  const float* chunk_keys = a.k_norm + static_cast<int64_t>(first) * K + head * D;
  CopyKeysTransposedAsync<D>(keys_t, chunk_keys, K, n);
  CopyKeysAsync<D>(keys, chunk_keys, K, n);
  __pipeline_commit();
  if (tid < 32) ChunkDecays(a, first, n, head, g_s, beta_s);
  // g_s and beta_s are published by the solve's first barrier

  // CG from x0 = 0 for every token of the chunk; token t's vectors live in the 4 threads of row t.
  float x[kCols], r[kCols], p[kCols], lambda[kCols];
  float delta = 0.0f;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    r[c] = t < n ? a.q_norm[row * K + head * D + c0 + kLanes * c] : 0.0f;
    x[c] = 0.0f;
    lambda[c] = a.weights.lambda[head * D + c0 + kLanes * c];
    delta += r[c] * r[c];
  }
  delta = RowSum<kLanes>(delta);
  const float initial_norm = sqrtf(delta), stop_norm = tolerance * initial_norm;
  auto converged = [&](float d) { return tolerance > 0.0f && sqrtf(d) <= stop_norm; };
  bool active = initial_norm > 0.0f && !converged(delta);
  int iterations = 0;
  // The search direction p is rounded to TF32 at every store into P: the products of P then
  // take two passes instead of three (MmaPass's kExactA) and stay exact, and x and r move along
  // the rounded p whose product was taken, so CG stays consistent. A float64 simulation
  // (tools/sim/cg_precision.py) finds x as accurate as with p unrounded.
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    p[c] = Tf32High(active ? r[c] : 0.0f);
    p_s[p_at(c)] = p[c];
  }
  // A tolerance-0 solve runs its whole budget, and once every token of the block is within
  // a.single_pass_residual of its start the rest of its products take one f16 pass: an error in
  // a product late in CG perturbs x by about that error times the step, which by then is small
  // (the inexact-Krylov argument), so x stays about as accurate as with 3xTF32 throughout. A
  // solve with a tolerance never switches: its stopping test reads the recurrence residual, which
  // would fall below the true one.
  //
  // f16 has TF32's 11 significand bits but a range of 2^-24 to 65504, so the operands are scaled
  // by powers of two: Hs_c once so that its largest entry is in [1, 2), undone with the decay
  // (m_factor), and each token's p at every store so that its largest element is, undone when Y
  // is read (p_unscale); the keys are unit vectors. The f16 operands replace the fp32 ones in
  // place, both copies of the keys in K^T's region, then Hs_c in K's (free by then); the readout
  // loads its fp32 operands again.
  const float single_pass_norm = kLate != LatePhase::kNone && tolerance == 0.0f
                                     ? a.single_pass_residual * initial_norm
                                     : -1.0f;
  bool half = false;
  __shared__ float hs_unscale;  // in shared memory: registers are short in the loop
  // One CG step of every token from Y = A p / y_scale; p is then the next direction, for the
  // caller to store into P.
  auto cg_step = [&](int it, float y_scale) {
    float ap[kCols], p_ap = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      ap[c] = y_s[local * Lo::kLdY + c0 + kLanes * c] * y_scale + lambda[c] * p[c];
      p_ap += p[c] * ap[c];
    }
    p_ap = RowSum<kLanes>(p_ap);
    // A is SPD, so p^T A p <= 0 only when p vanished: the residual is at rounding level.
    const bool step = active && p_ap > 0.0f;
    const float alpha = step ? delta / p_ap : 0.0f;
    float delta_new = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      x[c] += alpha * p[c];
      r[c] -= alpha * ap[c];
      delta_new += r[c] * r[c];
    }
    delta_new = RowSum<kLanes>(delta_new);
    if (step) {
      const float ratio = delta_new / delta;
#pragma unroll
      for (int c = 0; c < kCols; ++c) p[c] = r[c] + ratio * p[c];
      delta = delta_new;
      iterations = it + 1;
      if (delta == 0.0f || converged(delta)) active = false;
    } else {
      active = false;
    }
  };
  // In both loops P was last read by the products, which finished before the barriers in them.
  // The rows of the products are independent, so a token that stopped keeps its last (finite) p
  // there: its rows are computed and not used.
  __pipeline_wait_prior(0);  // Hs_c and the keys: published by the loop's first barrier
  int it = 0;
  for (; it < max_iterations; ++it) {      // 3xTF32
    if (!__syncthreads_or(active)) break;  // also publishes P
    if constexpr (kLate != LatePhase::kNone) {
      half = __syncthreads_and(!active || sqrtf(delta) <= single_pass_norm);
      if (half) break;
    }
    ChunkProduct<Lo::kLdY, false, true>(tiles, p_s, mat, 1.0f, keys_t, keys, g_s, beta_s, s_s, y_s);
    cg_step(it, 1.0f);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      p[c] = Tf32High(p[c]);
      p_s[p_at(c)] = p[c];
    }
  }
  if constexpr (kLate == LatePhase::kHandOff) {
    float* const rec = HandoffRecord<D>(a, chunk, head);
    if (half) {
      using Rec = Handoff<D>;
      const float hs_scale = PowerOfTwoScale(BlockMaxAbs<D * D>(mat, s_s));
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int at = t * D + c0 + kLanes * c;
        rec[Rec::kX + at] = x[c], rec[Rec::kR + at] = r[c], rec[Rec::kP + at] = p[c];
      }
      if (c0 == 0) {
        rec[Rec::kDelta + t] = delta;
        rec[Rec::kInitialNorm + t] = initial_norm;
        rec[Rec::kActive + t] = active ? 1.0f : 0.0f;
        rec[Rec::kIterations + t] = static_cast<float>(iterations);
      }
      if (tid == 0) {
        rec[Rec::kIteration] = static_cast<float>(it);
        rec[Rec::kHsScale] = hs_scale;
        rec[Rec::kHandedOff] = 1.0f;
      }
      return;
    }
    if (tid == 0) rec[Handoff<D>::kHandedOff] = 0.0f;
  }
  // The operands to f16; S's region is free until the first product.
  if (kLate == LatePhase::kInPlace && half) {
    uint32_t* const keys_t_half = reinterpret_cast<uint32_t*>(keys_t);
    uint32_t* const keys_half = keys_t_half + kL * D / 2;
    uint32_t* const mat_half = reinterpret_cast<uint32_t*>(keys);
    float p_unscale;
    auto store_p_half = [&] {
      float largest = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) largest = fmaxf(largest, fabsf(p[c]));
      const float scale = PowerOfTwoScale(RowMax<kLanes>(largest));
      p_unscale = 1.0f / scale;  // a power of two: exact
      __half* const p_half = reinterpret_cast<__half*>(p_s);
      const int p_half_base = AHalfOffset(local, c0, D);  // as p_at
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        p_half[p_half_base + AHalfOffset(0, kLanes * c, D)] = __float2half_rn(p[c] * scale);
      }
    };
    const float hs_scale = PowerOfTwoScale(BlockMaxAbs<D * D>(mat, s_s));
    if (tid == 0) hs_unscale = 1.0f / hs_scale;  // a power of two: exact
    StoreHalfOperandB<kL, D>(keys_half, [&](int s, int c) { return keys[state_offset(s, c)]; });
    StoreHalfOperandB<D, kL>(keys_t_half, [&](int c, int s) { return keys[state_offset(s, c)]; });
    __syncthreads();  // K's fp32 copy is read
    StoreHalfOperandB<D, D>(mat_half,
                            [&](int k, int c) { return hs_scale * mat[state_offset(k, c)]; });
    store_p_half();
    for (; it < max_iterations; ++it) {
      if (!__syncthreads_or(active)) break;  // also publishes P (and the operands)
      ChunkProduct<Lo::kLdY, true>(tiles, p_s, reinterpret_cast<const float*>(mat_half), hs_unscale,
                                   keys_t, reinterpret_cast<const float*>(keys_half), g_s, beta_s,
                                   s_s, y_s);
      cg_step(it, p_unscale);
      if (it + 1 < max_iterations) store_p_half();  // else P's next readers follow the barrier
    }
  }

  if (t < n && c0 == 0) {
    AddSolveStats(a, j, head, initial_norm, sqrtf(delta), iterations, converged(delta));
  }
  Readout<D, Rows>(a, smem, chunk, head, first, n, row0, x, half);
}

// The readout of every handed-off whole chunk, from the x the f16 solve left in its record: the
// products of Readout, in an order that streams Gs_c through shared memory in four slices of 32
// rows, so that a block needs 113 KB and two fit an SM, one's loads under the other's products.
// (Readout's layout, 210 KB, one block an SM, loads then products in every block: ncu timed 765
// us a 1B layer at 8 x 2048 on an H200.) In order: S = X K^T weighted; Y = X Gs_c slice by slice,
// the next slice loading meanwhile, V into K^T's region; Y = decay Y + S V; the RMSNorm from the
// accumulators, its row sums across the warps through shared memory.
template <int D>
struct StreamedReadoutLayout {
  static constexpr int kSliceRows = 32;
  static constexpr int kSlices = D / kSliceRows;
  static constexpr int kX = 0;                         // X: A operand [kL, D], fragment order
  static constexpr int kKeys = kX + kL * D;            // K^T [D, kL], then V [kL, D]: B operands
  static constexpr int kGs = kKeys + kL * D;           // two slices of Gs_c [kSliceRows, D]
  static constexpr int kS = kGs + 2 * kSliceRows * D;  // weighted S [kL, kL], then row sums
  static constexpr int kG = kS + kL * kL;              // [kL]
  static constexpr int kBeta = kG + kL;                // [kL]
  static constexpr int kTotal = kBeta + kL;
  static_assert(kSlices >= 2 && kSlices * kSliceRows == D, "whole slices, two stages");
};

template <int D>
__global__ void __launch_bounds__(kThreads, 2) ReadoutKernel(MesaPrefillArgs a) {
  using Lo = StreamedReadoutLayout<D>;
  using Tiles = SolveWarpTiles<D, kL>;
  constexpr int kKSteps = Lo::kSliceRows / 8;  // k-steps of a slice
  constexpr int kDSteps = D / 8;
  constexpr int kATileFloats = 16 * 8;  // one A tile in fragment order
  extern __shared__ float4 smem4[];
  float* const smem = reinterpret_cast<float*>(smem4);
  float* const x_s = smem + Lo::kX;
  float* const keys = smem + Lo::kKeys;
  float* const s_s = smem + Lo::kS;
  float* const g_s = smem + Lo::kG;
  const int chunk = blockIdx.x / a.num_heads, head = blockIdx.x % a.num_heads;
  const float* rec = HandoffRecord<D>(a, chunk, head);
  if (rec[Handoff<D>::kHandedOff] == 0.0f) return;
  const ChunkTokens tokens = LocateChunk(a, chunk);
  const int first = tokens.first, n = tokens.count;
  const int K = a.num_heads * D;
  const Tiles w(0);
  const float* gs = ChunkState<D>(a, chunk, head, 1);
  auto state_offset = [](int k, int c) { return BPermOffset(k, c, D); };
  auto fetch_slice = [&](int z) {
    CopyPermutedAsync<Lo::kSliceRows, D>(smem + Lo::kGs + (z & 1) * Lo::kSliceRows * D,
                                         gs + z * Lo::kSliceRows * D, D, Lo::kSliceRows,
                                         state_offset);
    __pipeline_commit();
  };
  CopyPermutedAsync<kL, D>(x_s, rec + Handoff<D>::kX, D, n,
                           [](int t, int c) { return APermOffset(t, c, D); });
  CopyKeysTransposedAsync<D>(keys, a.k_norm + static_cast<int64_t>(first) * K + head * D, K, n);
  __pipeline_commit();
  fetch_slice(0);
  fetch_slice(1);
  if (threadIdx.x < 32) ChunkDecays(a, first, n, head, g_s, smem + Lo::kBeta);
  __pipeline_wait_prior(2);  // X and K^T
  __syncthreads();
  {
    STiles<Tiles> s_acc = {};
    AccumulateTiles<false, Tiles::kTilesM, Tiles::kSTilesN, kDSteps, 4>(x_s, w.m0, keys, kL / 8,
                                                                        w.s_n0, s_acc);
    StoreWeightedKeys<false>(w, s_acc, g_s, smem + Lo::kBeta, s_s);
  }
  __pipeline_wait_prior(1);  // slice 0
  __syncthreads();           // S and slice 0 published, K^T read
  CopyKeysAsync<D>(keys, a.proj + static_cast<int64_t>(first) * a.proj_stride + 2 * K + head * D,
                   a.proj_stride, n);
  __pipeline_commit();
  YTiles<Tiles> acc = {};
  for (int z = 0; z < Lo::kSlices; ++z) {
    AccumulateTiles<false, Tiles::kTilesM, Tiles::kTilesN, kKSteps, kKSteps, kDSteps>(
        x_s + z * kKSteps * kATileFloats, w.m0, smem + Lo::kGs + (z & 1) * Lo::kSliceRows * D,
        D / 8, w.n0, acc);
    if (z + 1 == Lo::kSlices) break;
    __syncthreads();  // slice z read
    if (z + 2 < Lo::kSlices) {
      fetch_slice(z + 2);
      __pipeline_wait_prior(1);  // V and slice z + 1 (slice z + 2 may go on)
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // slice z + 1 (and V) published
  }
  ScaleByDecay(w, g_s, 1.0f, acc);
  constexpr int kSSteps = kL / 8;
  if (w.m0 == 0) {  // the first half of the rows: the second half of the keys has no weight
    AccumulateTiles<false, Tiles::kTilesM, Tiles::kTilesN, kSSteps / 2, 2, kSSteps>(
        s_s, w.m0, keys, D / 8, w.n0, acc);
  } else {
    AccumulateTiles<false, Tiles::kTilesM, Tiles::kTilesN, kSSteps, 2>(s_s, w.m0, keys, D / 8, w.n0,
                                                                       acc);
  }
  // The per-head RMSNorm: a row's sum of squares over its quad, then over the column warps.
  const int lane = threadIdx.x & 31, gr = lane >> 2, q = lane & 3;
  float row_sq[Tiles::kTilesM][2];
#pragma unroll
  for (int i = 0; i < Tiles::kTilesM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sq = 0.0f;
#pragma unroll
      for (int j = 0; j < Tiles::kTilesN; ++j) {
        sq += acc[i][j][2 * h] * acc[i][j][2 * h] + acc[i][j][2 * h + 1] * acc[i][j][2 * h + 1];
      }
      row_sq[i][h] = RowSum<4>(sq);
    }
  }
  __syncthreads();          // S read: its region takes the row sums
  float* const sums = s_s;  // [kL][kColGroups]
  const int col_group = (threadIdx.x >> 5) % Tiles::kColGroups;
  if (q == 0) {
#pragma unroll
    for (int i = 0; i < Tiles::kTilesM; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sums[(16 * (w.m0 + i) + gr + 8 * h) * Tiles::kColGroups + col_group] = row_sq[i][h];
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < Tiles::kTilesM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = 16 * (w.m0 + i) + gr + 8 * h;
      if (t >= n) continue;
      float total = 0.0f;
#pragma unroll
      for (int cg = 0; cg < Tiles::kColGroups; ++cg) total += sums[t * Tiles::kColGroups + cg];
      const float scale = rsqrtf(total / D + a.norm_eps);
      const int64_t row = first + t;
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out_bf16) + row * K + head * D;
      const float* gate = a.proj + row * a.proj_stride + 3 * K + head * D;
#pragma unroll
      for (int j = 0; j < Tiles::kTilesN; ++j) {
        const int c = 8 * (w.n0 + j) + 2 * q;
        float v0 = acc[i][j][2 * h] * scale * a.weights.o_norm[c];
        float v1 = acc[i][j][2 * h + 1] * scale * a.weights.o_norm[c + 1];
        if (a.output_gate) v0 *= Silu(gate[c]), v1 *= Silu(gate[c + 1]);
        *reinterpret_cast<__nv_bfloat162*>(out + c) = __floats2bfloat162_rn(v0, v1);
      }
    }
  }
}

// A step with tolerance-0 prompts takes the kernel with the late f16 phase: whole chunks given
// the hand-off scratch pass their late iterations to the f16 solve kernel, then to
// ReadoutKernel; the others convert in place.
template <int D, int Rows>
cudaError_t LaunchSolve(const MesaPrefillArgs& a, cudaStream_t stream) {
  constexpr size_t kSmem = SolveLayout<D, Rows>::kTotal * sizeof(float);
  const int blocks = a.table.num_chunks * a.num_heads * (kL / Rows);
  if (a.single_pass_residual <= 0.0f) {
    return LaunchWithDynamicSharedMemory(SolveKernel<D, Rows, LatePhase::kNone>, blocks, kThreads,
                                         kSmem, stream, a);
  }
  if constexpr (Rows == kL) {
    if (a.handoff != nullptr) {
      if (cudaError_t e = LaunchWithDynamicSharedMemory(SolveKernel<D, Rows, LatePhase::kHandOff>,
                                                        blocks, kThreads, kSmem, stream, a);
          e != cudaSuccess) {
        return e;
      }
      if (cudaError_t e = LaunchMesaHalfSolve(a, stream); e != cudaSuccess) return e;
      return LaunchWithDynamicSharedMemory(ReadoutKernel<D>, blocks, kThreads,
                                           StreamedReadoutLayout<D>::kTotal * sizeof(float), stream,
                                           a);
    }
  }
  return LaunchWithDynamicSharedMemory(SolveKernel<D, Rows, LatePhase::kInPlace>, blocks, kThreads,
                                       kSmem, stream, a);
}

template <int D>
cudaError_t Launch(const MesaPrefillArgs& a, cudaStream_t stream) {
  const int chunks = a.table.num_chunks, seqs = a.table.num_sequences, H = a.num_heads;
  if (a.conv_size == 4) {
    PrepareKernel<D, 4><<<chunks * H, kThreads, 0, stream>>>(a);
  } else {
    PrepareKernel<D, 0><<<chunks * H, kThreads, 0, stream>>>(a);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  // Chunk states read the old tails only through q_norm/k_norm, so the tails may move now.
  const int tail_blocks = (2 * H * D + kThreads - 1) / kThreads;
  TailsKernel<<<dim3(seqs, tail_blocks), kThreads, 0, stream>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  StartingStatesKernel<D><<<seqs * H * 2 * (D / kStartRows), kThreads, 0, stream>>>(a);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (cudaError_t e = a.chunk_state_rows == 64 ? LaunchChunkStates<D, 64>(a, stream)
                                               : LaunchChunkStates<D, 32>(a, stream);
      e != cudaSuccess) {
    return e;
  }
  switch (a.solve_rows) {
    case 16:
      return LaunchSolve<D, 16>(a, stream);
    case 32:
      return LaunchSolve<D, 32>(a, stream);
    default:
      return LaunchSolve<D, kL>(a, stream);
  }
}

}  // namespace

size_t MesaChunkedPrefillHandoffFloats(int head_dim) {
  return ForHeadDim(head_dim, size_t{0},
                    [](auto d) -> size_t { return Handoff<decltype(d)::value>::kFloats; });
}

size_t MesaChunkedPrefillSharedBytes(int head_dim) {
  return ForHeadDim(head_dim, size_t{0}, [](auto d) -> size_t {
    return SolveLayout<decltype(d)::value, kL>::kTotal * sizeof(float);
  });
}

bool PrefillHandsOff(int64_t num_chunks, int num_heads, int sm_count) {
  return num_chunks * num_heads > sm_count;
}

int PickChunkStateRows(int64_t sequences, int num_heads, int head_dim, int sm_count) {
  const int64_t blocks_of_32 = sequences * num_heads * 2 * (head_dim / 32);
  return blocks_of_32 > kChunkStateBlocksPerSm * static_cast<int64_t>(sm_count) &&
                 head_dim % 64 == 0
             ? 64
             : 32;
}

int PickSolveRows(const int32_t* prompt_tokens, int64_t prompts, int num_heads, int sm_count) {
  for (const int rows : {16, 32}) {
    int64_t slices = 0;  // every chunk but a prompt's last is full
    for (int64_t i = 0; i < prompts; ++i) slices += (prompt_tokens[i] + rows - 1) / rows;
    if (slices * num_heads <= sm_count) return rows;
  }
  return kPrefillChunk;
}

cudaError_t LaunchMesaChunkedPrefill(const MesaPrefillArgs& args, cudaStream_t stream) {
  if (args.table.num_sequences == 0) return cudaSuccess;
  return DispatchHeadDim(args.head_dim,
                         [&](auto d) { return Launch<decltype(d)::value>(args, stream); });
}

}  // namespace ridge::cuda
