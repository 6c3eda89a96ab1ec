#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <utility>

#include "kernels/cuda/decode_timeline.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/head_dim_dispatch.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "kernels/mesa_slot_layout.h"

namespace ridge::cuda {
namespace {

// Two block shapes (MesaBlockShape): 256 threads holding 64 floats of Hs each fit 2 blocks per
// SM; 128 threads holding 128 floats each (head_dim 128 only) fit 3, at some cost per block.
constexpr float kL2NormEps = 1e-6f;  // FLA's l2norm adds this to the sum of squares
// The final states' stores and Gs's copy in are spread over the first CG iterations, in up to
// kMaxStateChunks pieces a thread (see background_step in the kernel), instead of being issued
// all at once around the solve, where they filled the load/store queue and stalled the warps.
// Measured on an H200 (140M, batch 64): the step 3% faster. The solve itself slows while memory
// moves: at batch 64 the kernel is bound by its state traffic as much as by the iterations.
constexpr int kMaxStateChunks = 8;

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

struct Plus {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Min {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

template <typename Op = Plus>
__device__ __forceinline__ float WarpReduce(float v, Op op = {}) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Hs lives in registers: thread (part, c4) holds rows [part * kRows, +kRows) of columns
// 4c4..4c4+3 as kRows float4 (64 floats at D = 128 with 256 threads), for the whole block: whole
// 4x4 blocks of it, which the packed Hs in the state (kernels/mesa_slot_layout.h) stores. Gs lives
// in shared memory, copied in asynchronously while the first solve runs; each thread copies,
// updates and writes back exactly the float4s of Gs at its own (rows, columns), so Gs needs no
// barriers. Shared memory (floats):
template <int D, int Threads, int Taps>
struct Layout {
  static constexpr int kD = D;
  static constexpr int kThreads = Threads;
  static constexpr int kTaps = Taps;  // the largest conv size this shape takes
  static constexpr int kWarps = Threads / 32;
  // The 2D conv channels (q then k) are spread over the threads, kChannels per thread.
  static constexpr int kChannels = 2 * D > Threads ? 2 * D / Threads : 1;
  static constexpr int kCols4 = D / 4;              // float4 column groups of a row
  static constexpr int kParts = kThreads / kCols4;  // row partitions of a matrix-vector product
  static constexpr int kRows = D / kParts;          // rows per partition
  static constexpr int kGs = 0;                     // Gs [D, D]
  static constexpr int kDiag = kGs + D * D;         // diag(Hs), for the Jacobi start
  static constexpr int kPartial = kDiag + D;
  static constexpr int kQ = kPartial + kParts * D;
  static constexpr int kK = kQ + D;
  static constexpr int kV = kK + D;
  static constexpr int kP = kV + D;  // the Jacobi start x0, to multiply
  static constexpr int kR = kP + D;  // the residual, to multiply
  static constexpr int kX = kR + D;
  static constexpr int kReduce = kX + D;  // two alternating regions of 2 * kWarps floats
  static constexpr int kTail = kReduce + 4 * kWarps;  // conv tails, [kTaps-1][2D]
  static constexpr int kTotal = kTail + (kTaps - 1) * 2 * D;
  static_assert(kParts * kRows == D && kCols4 * kParts == kThreads, "bad tiling");
  static_assert(kChannels * Threads >= 2 * D && kThreads >= D, "every channel needs a thread");
  static_assert(kRows % 4 == 0, "the solve reads a thread's rows of vectors as float4");
};

// Block-wide reduction (a sum unless told); every thread gets the result. Alternating regions
// make one barrier enough.
template <int Warps, typename Op = Plus>
__device__ __forceinline__ float BlockSum(float v, float* reduce, int& region, Op op = {}) {
  v = WarpReduce(v, op);
  float* slots = reduce + region * 2 * Warps;
  region ^= 1;
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = slots[0];
#pragma unroll
  for (int w = 1; w < Warps; ++w) total = op(total, slots[w]);
  return total;
}

// Two block-wide sums at once (same regions as BlockSum).
template <int Warps>
__device__ __forceinline__ float2 BlockSum2(float a, float b, float* reduce, int& region) {
  a = WarpReduce(a);
  b = WarpReduce(b);
  float* slots = reduce + region * 2 * Warps;
  region ^= 1;
  if ((threadIdx.x & 31) == 0) {
    slots[threadIdx.x >> 5] = a;
    slots[Warps + (threadIdx.x >> 5)] = b;
  }
  __syncthreads();
  float2 total = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int w = 0; w < Warps; ++w) {
    total.x += slots[w];
    total.y += slots[Warps + w];
  }
  return total;
}

// Column form of this thread's share of y = Hs v: the sum over its rows for its 4 columns
// (Hs is symmetric, so column j of the sum is row j). v must be published in smem.
template <typename L>
__device__ __forceinline__ float4 PartialProduct(const float4 (&h)[L::kRows], const float* v) {
  const int part = threadIdx.x / L::kCols4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int r = 0; r < L::kRows; ++r) {
    const float s = v[part * L::kRows + r];
    acc.x += h[r].x * s;
    acc.y += h[r].y * s;
    acc.z += h[r].z * s;
    acc.w += h[r].w * s;
  }
  return acc;
}

// y[tid] = (Hs v)[tid] + lambda_i v_i for tid < D, from every thread's partial product.
template <int D, typename L>
__device__ __forceinline__ float SystemProduct(const float4 (&h)[L::kRows], const float* v,
                                               float* partial, float lambda_i, float v_i) {
  const int c4 = threadIdx.x % L::kCols4, part = threadIdx.x / L::kCols4;
  reinterpret_cast<float4*>(partial + part * D)[c4] = PartialProduct<L>(h, v);
  __syncthreads();
  float y = 0.0f;
  if (threadIdx.x < D) {
#pragma unroll
    for (int p = 0; p < L::kParts; ++p) y += partial[p * D + threadIdx.x];
    y += lambda_i * v_i;
  }
  return y;
}

// Rows [chunk * kChunkRows, +kChunkRows) of this thread's rows, the unit of BackgroundStep.
template <typename L>
struct StateChunk {
  static constexpr int kChunks = L::kRows < kMaxStateChunks ? L::kRows : kMaxStateChunks;
  static constexpr int kChunkRows = L::kRows / kChunks;
  static_assert(kChunkRows * kChunks == L::kRows, "rows must split into the chunks");
  static_assert(4 % kChunkRows == 0, "a chunk's rows must lie in one 4-row block");
  // The matrix row of this thread's r-th row of the chunk.
  __device__ static int Row(int chunk, int r) {
    return threadIdx.x / L::kCols4 * L::kRows + chunk * kChunkRows + r;
  }
  // Float4 index in a [D, D] matrix of this thread's r-th row of the chunk.
  __device__ static int At(int chunk, int r) {
    return Row(chunk, r) * L::kCols4 + threadIdx.x % L::kCols4;
  }
};

// This thread's Hs registers from the packed Hs of the state, which holds the 4x4 blocks (I, J)
// with J >= I, through shared memory (`staging`, free until Gs is copied in): the block copies
// the packed triangle in coalesced 16-byte pieces, then each thread takes its blocks, those
// below the diagonal (J = c4 < I) as block (J, I) transposed. (Reading the transposed blocks
// straight from global memory scattered a warp's loads over up to 32 block-rows and made the
// 140M step slower than the unpacked layout on an H200: batch 64 1.38 -> 1.42 ms.)
template <typename L>
__device__ __forceinline__ void LoadPackedHs(float4 (&h)[L::kRows], const float* g_hs,
                                             float4* staging) {
  constexpr int kFloat4s = static_cast<int>(PackedHsFloats(L::kD) / 4);
  const float4* src = reinterpret_cast<const float4*>(g_hs);
#pragma unroll
  for (int i = threadIdx.x; i < kFloat4s; i += L::kThreads) {
    __pipeline_memcpy_async(staging + i, src + i, sizeof(float4));
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  const int c4 = threadIdx.x % L::kCols4, part = threadIdx.x / L::kCols4;
#pragma unroll
  for (int b = 0; b < L::kRows / 4; ++b) {
    const int block = part * (L::kRows / 4) + b;
    if (c4 >= block) {  // rows 4 block + j of the stored block (block, c4), D - 4 block apart
      const float4* rows = staging + PackedHsOffset(L::kD, 4 * block, c4) / 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) h[4 * b + j] = rows[j * (L::kD - 4 * block) / 4];
    } else {  // column j of the stored block (c4, block), whose rows are D - 4 c4 apart
      const float* rows =
          reinterpret_cast<const float*>(staging) + PackedHsOffset(L::kD, 4 * c4, block);
      const int stride = L::kD - 4 * c4;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        h[4 * b + j] =
            make_float4(rows[j], rows[stride + j], rows[2 * stride + j], rows[3 * stride + j]);
      }
    }
  }
}

// Stores chunk `chunk` of this thread's Hs registers where the packed Hs keeps them (on or
// above the diagonal blocks). The registers need compile-time indices, so each chunk is its own
// unrolled store, picked by comparison; the addresses come from the run-time chunk, so that the
// compiler does not hoist every chunk's address out of the solve loop into registers.
template <typename L, int... Chunk>
__device__ __forceinline__ void StoreHsChunk(const float4 (&h)[L::kRows], float* g_hs, int chunk,
                                             std::integer_sequence<int, Chunk...>) {
  using C = StateChunk<L>;
  const int c4 = threadIdx.x % L::kCols4, row = C::Row(chunk, 0), block = row / 4;
  if (c4 < block) return;  // below the diagonal: the transposed block is stored instead
  float4* dst = reinterpret_cast<float4*>(g_hs + PackedHsOffset(L::kD, row, c4));
  const int stride4 = (L::kD - 4 * block) / 4;  // float4s between rows of the block-row
  auto store = [&](auto c) {
    if (chunk != c.value) return;
#pragma unroll
    for (int r = 0; r < C::kChunkRows; ++r) dst[r * stride4] = h[c.value * C::kChunkRows + r];
  };
  (store(std::integral_constant<int, Chunk>{}), ...);
}

// Gs = gamma Gs + beta k v^T on one chunk of this thread's float4s of Gs (no barrier needed:
// no other thread touches them), also written to the state (dst) after the step's last token.
template <typename L>
__device__ __forceinline__ void UpdateGsChunk(float4* gs_s, const float* k_s, const float* v_s,
                                              float gamma, float beta, float4* dst, int chunk) {
  using C = StateChunk<L>;
  const int c4 = threadIdx.x % L::kCols4, part = threadIdx.x / L::kCols4;
  const float4 vc = reinterpret_cast<const float4*>(v_s)[c4];
#pragma unroll
  for (int r = 0; r < C::kChunkRows; ++r) {
    const int at = C::At(chunk, r);
    const float bk = beta * k_s[part * L::kRows + chunk * C::kChunkRows + r];
    float4 g = gs_s[at];
    g.x = gamma * g.x + bk * vc.x;
    g.y = gamma * g.y + bk * vc.y;
    g.z = gamma * g.z + bk * vc.z;
    g.w = gamma * g.w + bk * vc.w;
    gs_s[at] = g;
    if (dst != nullptr) dst[at] = g;
  }
}

template <int D, int Threads, int Taps>
__global__ void __launch_bounds__(Threads, Threads == 256 ? 2 : 3)
    MesaRecurrenceKernel(MesaRecurrenceArgs a) {
  using L = Layout<D, Threads, Taps>;
  constexpr int kWarps = L::kWarps;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float4* gs_s = smem4 + L::kGs / 4;
  float* diag_s = smem + L::kDiag;
  float* partial = smem + L::kPartial;
  float* q_s = smem + L::kQ;
  float* k_s = smem + L::kK;
  float* v_s = smem + L::kV;
  float* p_s = smem + L::kP;
  float* r_s = smem + L::kR;
  float* x_s = smem + L::kX;
  float* reduce = smem + L::kReduce;
  int region = 0;
  RIDGE_TIMELINE_ENTRY();
  WaitForPreviousKernel();  // before any read: see dependent_launch.h

  const int tid = threadIdx.x;
  const int seq = blockIdx.x / a.num_heads, head = blockIdx.x % a.num_heads;
  const int H = a.num_heads, K = H * D, W = a.conv_size;
  const int begin = a.sequences.row_begin[seq], count = a.sequences.row_count[seq];
  if (count == 0) return;  // padding of a captured batch-size bucket: no slot, no rows
  const float tolerance = a.sequences.tolerance[seq];
  const int max_iterations = a.sequences.max_iterations[seq];
  const bool jacobi = a.sequences.jacobi_start[seq] != 0;

  float* layer_state =
      a.state_pool + a.sequences.slot[seq] * a.slot_floats + a.layer * a.layer_floats;
  float* g_hs = layer_state + SlotHsOffset(D, head);  // packed
  float* g_gs = layer_state + SlotGsOffset(H, D, head);
  float* q_tail = layer_state + SlotTailsOffset(H, D);  // [W-1, K]
  float* k_tail = q_tail + static_cast<int64_t>(W - 1) * K;

  const int c4 = tid % L::kCols4, part = tid / L::kCols4;
  float4 h[L::kRows];  // this thread's share of Hs for the whole block; Gs comes during the solve
  LoadPackedHs<L>(h, g_hs, gs_s);  // the barriers before the first Gs copy end its reads
  RIDGE_TIMELINE_PHASE(kDecodePhaseHsLoaded);

  // Conv slot c in [0, 2D) is q channel head*D + c for c < D, else k channel head*D + c - D;
  // thread tid convolves slots tid + i * Threads, i < kChannels. A slot's raw tail, oldest
  // first, is tail[j * 2D + c] (shared memory, private to its thread).
  float* tail = smem + L::kTail;
  auto tail_source = [&](int c) {  // the slot's tail in the state, [W-1, K] with stride K
    return (c < D ? q_tail : k_tail) + head * D + c % D;
  };
#pragma unroll
  for (int i = 0; i < L::kChannels; ++i) {
    const int c = tid + i * Threads;
    if (c >= 2 * D) continue;
#pragma unroll
    for (int j = 0; j < L::kTaps - 1; ++j)
      tail[j * 2 * D + c] = j < W - 1 ? tail_source(c)[static_cast<int64_t>(j) * K] : 0.0f;
  }
  const float lambda_i = tid < D ? a.weights.lambda[head * D + tid] : 0.0f;
  const float o_norm_i = tid < D ? a.weights.o_norm[tid] : 0.0f;
  const float a_bias = a.weights.a_bias[head], b_bias = a.weights.b_bias[head];
  // A = Hs + diag(lambda) with Hs PSD, so min lambda bounds its spectrum below (see the solve).
  const float lambda_min = BlockSum<kWarps>(tid < D ? lambda_i : INFINITY, reduce, region, Min{});
  const int a_col = DecayGateColumn(H, D, a.output_gate), b_col = a_col + H;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out_bf16);

  for (int t = 0; t < count; ++t) {
    const int64_t row = begin + t;
    const float* pr = a.proj + row * a.proj_stride;

    // Short convolution (W <= kTaps), SiLU, then the L2 norms of q and k over D channels each.
    float val[L::kChannels];
    float q_sq = 0.0f, k_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < L::kChannels; ++i) {
      const int c = tid + i * Threads;
      val[i] = 0.0f;
      if (c >= 2 * D) continue;
      const float raw = pr[(c < D ? 0 : K) + head * D + c % D];
      // Weights are re-read per token (cached) rather than held: registers go to Hs.
      const float* conv_weights =
          (c < D ? a.weights.q_conv : a.weights.k_conv) + (head * D + c % D) * W;
      // Tap j reads the tail for j < W-1 and the current token at j = W-1 (compile-time
      // indices only, so the loop unrolls).
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < L::kTaps; ++j) {
        const float x =
            j < W - 1 ? tail[(j < L::kTaps - 1 ? j : 0) * 2 * D + c] : (j == W - 1 ? raw : 0.0f);
        if (j < W) sum += conv_weights[j] * x;
      }
#pragma unroll
      for (int j = 0; j < L::kTaps - 1; ++j) {
        if (j < W - 2) {
          tail[j * 2 * D + c] = tail[(j + 1 < L::kTaps - 1 ? j + 1 : j) * 2 * D + c];
        } else if (j == W - 2) {
          tail[j * 2 * D + c] = raw;
        }
      }
      val[i] = Silu(sum);
      (c < D ? q_sq : k_sq) += val[i] * val[i];
    }
    if (tid < D) v_s[tid] = pr[2 * K + head * D + tid];
    const float2 norms_sq = BlockSum2<kWarps>(q_sq, k_sq, reduce, region);
    RIDGE_TIMELINE_PHASE(kDecodePhaseInputs);
#pragma unroll
    for (int i = 0; i < L::kChannels; ++i) {
      const int c = tid + i * Threads;
      if (c >= 2 * D) continue;
      (c < D ? q_s : k_s)[c % D] = val[i] / sqrtf((c < D ? norms_sq.x : norms_sq.y) + kL2NormEps);
    }
    const float gamma = Sigmoid(pr[a_col + head] + a_bias);
    const float beta = Sigmoid(pr[b_col + head] + b_bias);
    __syncthreads();

    // Hs = gamma Hs + beta k k^T in registers; the threads holding diagonal entries publish them.
    {
      const float4 kc = reinterpret_cast<const float4*>(k_s)[c4];
#pragma unroll
      for (int r = 0; r < L::kRows; ++r) {
        const int i = part * L::kRows + r;
        const float bk = beta * k_s[i];
        h[r].x = gamma * h[r].x + bk * kc.x;
        h[r].y = gamma * h[r].y + bk * kc.y;
        h[r].z = gamma * h[r].z + bk * kc.z;
        h[r].w = gamma * h[r].w + bk * kc.w;
        const int offset = i - 4 * c4;  // column of the diagonal within this float4, if any
        if (offset == 0) diag_s[i] = h[r].x;
        if (offset == 1) diag_s[i] = h[r].y;
        if (offset == 2) diag_s[i] = h[r].z;
        if (offset == 3) diag_s[i] = h[r].w;
      }
    }
    __syncthreads();

    // State traffic and the Gs update, one step per CG iteration while the solve runs (the rest
    // after it): steps [0, kChunks) store a chunk of the final Hs and, for the first token, start
    // copying a chunk of Gs into shared memory; steps [kChunks, 2 kChunks) update a chunk of Gs
    // (storing it after the last token). Gs is first read at step kChunks, so its copies have
    // had kChunks iterations to arrive.
    constexpr int kChunks = StateChunk<L>::kChunks;
    const bool last_token = t == count - 1;
    int steps_done = 0;
    auto background_step = [&](int step) {
      if (step < kChunks) {
        if (last_token) {
          StoreHsChunk<L>(h, g_hs, step, std::make_integer_sequence<int, kChunks>{});
        }
        if (t == 0) {
          for (int r = 0; r < StateChunk<L>::kChunkRows; ++r) {
            const int at = StateChunk<L>::At(step, r);
            __pipeline_memcpy_async(gs_s + at, reinterpret_cast<const float4*>(g_gs) + at,
                                    sizeof(float4));
          }
          __pipeline_commit();
        }
      } else {
        if (step == kChunks) __pipeline_wait_prior(0);
        UpdateGsChunk<L>(gs_s, k_s, v_s, gamma, beta,
                         last_token ? reinterpret_cast<float4*>(g_gs) : nullptr, step - kChunks);
      }
      steps_done = step + 1;
    };

    // CG on (Hs + diag(lambda)) x = q; element i = tid lives in threads < D. Chronopoulos-Gear
    // form: each iteration multiplies A by the residual r_k (published in r_s) and gets both of
    // its inner products, (r_k, A r_k) from the product's partial sums and (r_k, r_k), from one
    // block-wide sum; the direction p_k and s_k = A p_k follow by recurrences in the threads
    // owning their elements. One reduction and two barriers per iteration, where the textbook
    // form needs two reductions in sequence. Same iterates in exact arithmetic. The three scalar
    // divisions use __fdividef (2 ulp; its operands here are far from its 2^126 limit): IEEE
    // division's slow-path-capable sequence sat on every thread's critical path, and dropping
    // it took an iteration from 0.65 to 0.50 us at batch 1 on an H200.
    const float q_i = tid < D ? q_s[tid] : 0.0f;
    float x_i = 0.0f, r_i = q_i;
    if (jacobi) {
      x_i = tid < D ? q_i / (diag_s[tid] + lambda_i) : 0.0f;
      if (tid < D) p_s[tid] = x_i;
      __syncthreads();
      const float ax = SystemProduct<D, L>(h, p_s, partial, lambda_i, x_i);
      r_i = tid < D ? q_i - ax : 0.0f;
    }
    if (tid < D) r_s[tid] = r_i;  // the Jacobi product's reads all precede the barrier below
    float delta = BlockSum<kWarps>(r_i * r_i, reduce, region);  // ||r||^2; publishes r_s
    const float initial_norm = sqrtf(delta);
    // |r| <= tolerance |r_0|, compared squared: no square root on the iteration's critical path.
    const float stop_sq = (tolerance * initial_norm) * (tolerance * initial_norm);
    int iteration = 0;
    RIDGE_TIMELINE_PHASE(kDecodePhaseSolveStart);
    float relative_residual = 0.0f;
    bool capped = false;
    if (initial_norm > 0.0f) {
      auto converged = [&](float d) { return tolerance > 0.0f && d <= stop_sq; };
      const float4 lambda4 = reinterpret_cast<const float4*>(a.weights.lambda + head * D)[c4];
      // p_{k-1}, s_{k-1} = A p_{k-1}, ||r_{k-1}||^2 and (p_{k-1}, A p_{k-1}) / ||r_{k-1}||^4.
      float p_i = 0.0f, s_i = 0.0f, r_sq_prev = 1.0f, curvature_prev = 0.0f;
      while (!converged(delta) && iteration < max_iterations) {
        if (iteration < 2 * kChunks) background_step(iteration);
        if (iteration == 8) RIDGE_TIMELINE_PHASE(kDecodePhaseIteration8);
        if (iteration == 16) RIDGE_TIMELINE_PHASE(kDecodePhaseIteration16);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        const float4* r_rows = reinterpret_cast<const float4*>(r_s + part * L::kRows);
#pragma unroll
        for (int r4 = 0; r4 < L::kRows / 4; ++r4) {
          const float4 rr = r_rows[r4];
          const float r_row[4] = {rr.x, rr.y, rr.z, rr.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float4 hr = h[4 * r4 + j];
            acc.x += hr.x * r_row[j];
            acc.y += hr.y * r_row[j];
            acc.z += hr.z * r_row[j];
            acc.w += hr.w * r_row[j];
          }
        }
        const float4 rc = reinterpret_cast<const float4*>(r_s)[c4];
        float rar = acc.x * rc.x + acc.y * rc.y + acc.z * rc.z + acc.w * rc.w, rr = 0.0f;
        if (part == 0) {
          rar += lambda4.x * rc.x * rc.x + lambda4.y * rc.y * rc.y + lambda4.z * rc.z * rc.z +
                 lambda4.w * rc.w * rc.w;
          rr = rc.x * rc.x + rc.y * rc.y + rc.z * rc.z + rc.w * rc.w;
        }
        reinterpret_cast<float4*>(partial + part * D)[c4] = acc;
        const float2 sums = BlockSum2<kWarps>(rar, rr, reduce, region);  // barrier 1
        const float r_sq = sums.y;                                       // ||r_k||^2
        delta = r_sq;
        if (r_sq == 0.0f || converged(r_sq)) break;
        // (p_k, A p_k) = (r_k, A r_k) - beta_k^2 (p_{k-1}, A p_{k-1}), beta_k = r_sq / r_sq_prev.
        float p_ap = sums.x - r_sq * r_sq * curvature_prev;
        float beta_cg = iteration == 0 ? 0.0f : __fdividef(r_sq, r_sq_prev);
        if (!(p_ap > 0.5f * lambda_min * r_sq)) {
          // In exact arithmetic (p_k, A p_k) >= lambda_min(A) ||p_k||^2 >= min_i lambda_i r_sq
          // (||p_k|| >= ||r_k||), so a value below half that bound means the recurrence lost its
          // accuracy to cancellation, as it does once the residual is at rounding level. Restart
          // from p_k = r_k, whose (p, A p) = (r, A r) was computed directly: a zero-tolerance
          // solve still runs its whole budget as the textbook form does, and no step is taken
          // with a (p, A p) near zero. A is SPD, so (r, A r) <= 0 only when r vanished.
          p_ap = sums.x;
          beta_cg = 0.0f;
          if (!(p_ap > 0.0f)) break;
        }
        const float alpha = __fdividef(r_sq, p_ap);
        if (tid < D) {
          float w_i = lambda_i * r_i;  // (A r_k)_i
#pragma unroll
          for (int p = 0; p < L::kParts; ++p) w_i += partial[p * D + tid];
          p_i = __fmaf_rn(beta_cg, p_i, r_i);
          s_i = __fmaf_rn(beta_cg, s_i, w_i);
          x_i += alpha * p_i;
          r_i -= alpha * s_i;
          r_s[tid] = r_i;  // every read of r_s this iteration came before barrier 1
        }
        curvature_prev = __fdividef(__fdividef(p_ap, r_sq), r_sq);
        r_sq_prev = r_sq;
        ++iteration;
        __syncthreads();  // barrier 2: r_{k+1} published, partial consumed
      }
      if (iteration == max_iterations && max_iterations > 0) {
        delta = BlockSum<kWarps>(r_i * r_i, reduce, region);  // the last update's residual
      }
      relative_residual = sqrtf(delta) / initial_norm;
      capped = iteration >= max_iterations && !converged(delta);
    }
    RIDGE_TIMELINE_PHASE(kDecodePhaseSolveEnd);
    if (tid == 0) {
      a.counters[seq * H + head].Add(iteration, capped, relative_residual);  // this block's alone
    }
    if (tid < D) x_s[tid] = x_i;
    __syncthreads();

    // The readout o = Gs^T x (Gs was updated during or after the solve).
    {
      while (steps_done < 2 * kChunks) background_step(steps_done);
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int r = 0; r < L::kRows; ++r) {
        const int i = part * L::kRows + r;
        const float xi = x_s[i];
        const float4 g = gs_s[i * L::kCols4 + c4];
        acc.x += xi * g.x;
        acc.y += xi * g.y;
        acc.z += xi * g.z;
        acc.w += xi * g.w;
      }
      reinterpret_cast<float4*>(partial + part * D)[c4] = acc;
    }
    __syncthreads();
    RIDGE_TIMELINE_PHASE(kDecodePhaseReadout);
    float o_i = 0.0f;
    if (tid < D) {
#pragma unroll
      for (int p = 0; p < L::kParts; ++p) o_i += partial[p * D + tid];
    }
    // Per-head RMSNorm over D with the shared weight, then the optional gate silu(g).
    const float mean_sq = BlockSum<kWarps>(o_i * o_i, reduce, region) / D;
    if (tid < D) {
      float o = o_i * rsqrtf(mean_sq + a.norm_eps) * o_norm_i;
      if (a.output_gate) o *= Silu(pr[3 * K + head * D + tid]);
      out[row * K + head * D + tid] = __float2bfloat16(o);
    }
    RIDGE_TIMELINE_PHASE(kDecodePhaseOutput);
    // The next token rewrites q_s/k_s/v_s/x_s only after its first barrier, which every thread
    // reaches after finishing this token's reads.
  }

#pragma unroll
  for (int i = 0; i < L::kChannels; ++i) {
    const int c = tid + i * Threads;
    if (c >= 2 * D) continue;
#pragma unroll
    for (int j = 0; j < L::kTaps - 1; ++j) {
      if (j < W - 1) tail_source(c)[static_cast<int64_t>(j) * K] = tail[j * 2 * D + c];
    }
  }
  RIDGE_TIMELINE_EXIT();
}

template <int D, int Threads, int Taps>
cudaError_t LaunchShape(const MesaRecurrenceArgs& args, cudaStream_t stream) {
  return LaunchDependent(MesaRecurrenceKernel<D, Threads, Taps>,
                         dim3(args.num_sequences * args.num_heads), dim3(Threads),
                         Layout<D, Threads, Taps>::kTotal * sizeof(float), stream, args);
}

template <int D>
cudaError_t Launch(const MesaRecurrenceArgs& args, cudaStream_t stream) {
  // Up to two blocks per SM, the 256-thread shape is faster per block; beyond that the
  // 128-thread one fits three per SM, which pays (e.g. 384 blocks on 132 SMs: one wave instead
  // of 1.45). Three of those only fit in shared memory with conv tails of up to 3 tokens.
  constexpr int kSmallTaps = 4;
  if constexpr (D == 128) {
    if (args.num_sequences * args.num_heads > 2 * args.sm_count && args.conv_size <= kSmallTaps) {
      return LaunchShape<D, 128, kSmallTaps>(args, stream);
    }
  }
  return LaunchShape<D, 256, kMaxConvSize>(args, stream);
}

}  // namespace

cudaError_t CopyDecodeTimeline(int64_t* host, int blocks) {
#ifdef RIDGE_DECODE_TIMELINE
  if (blocks < 0 || blocks > kDecodeTimelineBlocks) return cudaErrorInvalidValue;
  return cudaMemcpyFromSymbol(host, g_decode_timeline,
                              sizeof(int64_t) * kDecodeTimelineFields * blocks);
#else
  (void)host, (void)blocks;
  return cudaErrorNotSupported;
#endif
}

bool MesaRecurrenceSupports(int head_dim, int conv_size) {
  return IsSupportedHeadDim(head_dim) && conv_size >= 1 && conv_size <= kMaxConvSize;
}

cudaError_t LaunchMesaRecurrence(const MesaRecurrenceArgs& args, cudaStream_t stream) {
  if (args.num_sequences == 0) return cudaSuccess;
  return DispatchHeadDim(args.head_dim,
                         [&](auto d) { return Launch<decltype(d)::value>(args, stream); });
}

}  // namespace ridge::cuda
