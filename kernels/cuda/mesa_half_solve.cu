// The f16 solve of the chunked prefill: the late CG iterations of a tolerance-0 chunk, handed
// off by the first solve kernel (kernels/cuda/mesa_chunked_prefill.cu) once every token's
// residual is at most MesaPrefillArgs::single_pass_residual of its start.
//
// Each warp owns 16 tokens of the chunk and every column of their vectors, in the layout of the
// mma.sync accumulators, and runs their CG on its own: the f16 A fragments of P come straight from
// the registers that hold p (an accumulator pair of 8-column tiles is one 16-column A fragment),
// S = P K^T stays in registers, weighted, as the A fragments of S K, and the inner products of a
// token reduce over the 4 lanes that hold its row. So an iteration has no block barrier and
// nothing goes through shared memory but the operands every warp reads: Hs_c, K^T and K in f16
// fragment order, the weights and x. The first kernel's iteration needed three barriers and a
// round trip of Y, S and P through shared memory, and with 210 KB of fp32 operands ran one block
// an SM; this one takes 113 KB, two blocks an SM.
//
// Scaling into f16's range by powers of two, as the first kernel's in-place f16 phase does: Hs_c
// so that its largest entry is in [1, 2) (undone with the decay), each token's p likewise at
// every step (CG runs on p^ = s p: alpha' = s delta / (p^, A p^) gives x += alpha' p^ and
// r -= alpha' A p^); the keys are unit vectors.
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/dynamic_shared_memory.h"
#include "kernels/cuda/head_dim_dispatch.h"
#include "kernels/cuda/mesa_prefill_solve_common.h"
#include "kernels/cuda/tf32x3_mma.h"
#include "kernels/mma_fragment_order.h"

namespace ridge::cuda {
namespace {

constexpr int kWarpRows = 16;               // tokens a warp
constexpr int kHalfWarps = kL / kWarpRows;  // warps a chunk
constexpr int kHalfThreads = 32 * kHalfWarps;
constexpr int kKeyTiles = kL / 8;   // S's 8-column tiles
constexpr int kKeySteps = kL / 16;  // k-steps of S K

// Dynamic shared memory, 32-bit words. The decays live in x's region until x is loaded.
template <int D>
struct HalfLayout {
  static constexpr int kMat = 0;                       // scaled Hs_c, f16 B operand [D, D]
  static constexpr int kKeysT = kMat + D * D / 2;      // K^T, f16 B operand [D, kL]
  static constexpr int kKeys = kKeysT + D * kL / 2;    // K, f16 B operand [kL, D]
  static constexpr int kWeights = kKeys + kL * D / 2;  // W, each thread's own, accumulator order
  static constexpr int kX = kWeights + kL * kL;        // x, each thread's own, accumulator order
  static constexpr int kLambda = kX + kL * D;          // [D]
  static constexpr int kTotal = kLambda + D;
  static_assert(kX >= 2 * kL, "the decays fit in x's region");
};

// The B operands keep f16 fragment order with the tiles of each pair along n interleaved
// (BHalfPairedWord; every operand here has an even number of tiles a row): one 16-byte load a lane
// for two tiles, half the loads of the products.
__device__ __forceinline__ uint4 LoadFragmentPair(const uint32_t* b, int first_tile) {
  return reinterpret_cast<const uint4*>(b)[(first_tile >> 1) * 32 + (threadIdx.x & 31)];
}

// c0 += a b0 and c1 += a b1 for the tile pair b = (b0, b1) of LoadFragmentPair.
__device__ __forceinline__ void MmaPair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                        uint4 b) {
  const uint32_t b0[2] = {b.x, b.y}, b1[2] = {b.z, b.w};
  MmaF16(c0, a, b0);
  MmaF16(c1, a, b1);
}

__device__ __forceinline__ float2 Unpack(uint32_t word) {
  return __half22float2(*reinterpret_cast<const __half2*>(&word));
}

template <int D>
__global__ void __launch_bounds__(kHalfThreads, 2) HalfSolveKernel(MesaPrefillArgs a) {
  using Lo = HalfLayout<D>;
  using Rec = Handoff<D>;
  constexpr int kN = D / 8;   // accumulator tiles along a head vector
  constexpr int kK = D / 16;  // f16 k-steps along a head vector
  extern __shared__ float4 smem4[];
  uint32_t* const words = reinterpret_cast<uint32_t*>(smem4);
  const int chunk = blockIdx.x / a.num_heads, head = blockIdx.x % a.num_heads;
  float* const rec = HandoffRecord<D>(a, chunk, head);
  if (rec[Rec::kHandedOff] == 0.0f) return;
  const ChunkTokens tokens = LocateChunk(a, chunk);
  const int j = tokens.sequence, first = tokens.first, n = tokens.count;
  const int K = a.num_heads * D, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2, q = lane & 3;
  const int row0 = kWarpRows * warp + gr;  // the thread's rows: row0 and row0 + 8

  float* const g_s = reinterpret_cast<float*>(words + Lo::kX);
  float* const beta_s = g_s + kL;
  float* const lambda_s = reinterpret_cast<float*>(words + Lo::kLambda);
  if (warp == 0) ChunkDecays(a, first, n, head, g_s, beta_s);
  for (int c = tid; c < D; c += kHalfThreads) lambda_s[c] = a.weights.lambda[head * D + c];

  // The operands in f16 fragment order. Hs_c is symmetric: B = Hs_c for P Hs_c.
  const float hs_scale = rec[Rec::kHsScale];
  // Each thread converts whole float4s of two rows, every load of its share issued at once (the
  // loops are unrolled): a load per word waited a memory round trip per few words.
  const float4* hs = reinterpret_cast<const float4*>(ChunkState<D>(a, chunk, head, 0));
  constexpr int kCols4 = D / 4;
  static_assert(D / 2 * kCols4 % kHalfThreads == 0 && kL / 2 * kCols4 % kHalfThreads == 0,
                "whole units for every thread");
#pragma unroll
  for (int i = 0; i < D / 2 * kCols4 / kHalfThreads; ++i) {  // rows k, k + 1, columns c..c + 3
    const int unit = tid + i * kHalfThreads, k = 2 * (unit / kCols4), c = 4 * (unit % kCols4);
    const float4 lo = hs[k * kCols4 + c / 4], hi = hs[(k + 1) * kCols4 + c / 4];
    uint32_t* const mat = words + Lo::kMat;
    mat[BHalfPairedWord(k, c, D)] = PackHalves(hs_scale * lo.x, hs_scale * hi.x);
    mat[BHalfPairedWord(k, c + 1, D)] = PackHalves(hs_scale * lo.y, hs_scale * hi.y);
    mat[BHalfPairedWord(k, c + 2, D)] = PackHalves(hs_scale * lo.z, hs_scale * hi.z);
    mat[BHalfPairedWord(k, c + 3, D)] = PackHalves(hs_scale * lo.w, hs_scale * hi.w);
  }
  // Keys s, s + 1 (zero past n), dims c..c + 3: four words of K^T (a word is dims c, c + 1 of a
  // key) and four of K (keys s, s + 1 of a dim).
  const float* keys = a.k_norm + static_cast<int64_t>(first) * K + head * D;
#pragma unroll
  for (int i = 0; i < kL / 2 * kCols4 / kHalfThreads; ++i) {
    const int unit = tid + i * kHalfThreads, s = 2 * (unit / kCols4), c = 4 * (unit % kCols4);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 k0 = s < n ? *reinterpret_cast<const float4*>(keys + s * K + c) : zero;
    const float4 k1 = s + 1 < n ? *reinterpret_cast<const float4*>(keys + (s + 1) * K + c) : zero;
    uint32_t* const keys_t = words + Lo::kKeysT;
    keys_t[BHalfPairedWord(c, s, kL)] = PackHalves(k0.x, k0.y);
    keys_t[BHalfPairedWord(c + 2, s, kL)] = PackHalves(k0.z, k0.w);
    keys_t[BHalfPairedWord(c, s + 1, kL)] = PackHalves(k1.x, k1.y);
    keys_t[BHalfPairedWord(c + 2, s + 1, kL)] = PackHalves(k1.z, k1.w);
    uint32_t* const keys_h = words + Lo::kKeys;
    keys_h[BHalfPairedWord(s, c, D)] = PackHalves(k0.x, k1.x);
    keys_h[BHalfPairedWord(s, c + 1, D)] = PackHalves(k0.y, k1.y);
    keys_h[BHalfPairedWord(s, c + 2, D)] = PackHalves(k0.z, k1.z);
    keys_h[BHalfPairedWord(s, c + 3, D)] = PackHalves(k0.w, k1.w);
  }
  __syncthreads();  // the decays are published

  // The thread's weights W[t][u] = beta_u exp(G_t - G_u) (u <= t, else 0) for its rows and the
  // columns of S it holds, and its rows' decays exp(G_t), with Hs_c's scale undone.
  float4* const weights = reinterpret_cast<float4*>(words + Lo::kWeights);
  auto weight = [&](int t, int u) {
    return u <= t ? beta_s[u] * __expf(fminf(g_s[t] - g_s[u], 0.0f)) : 0.0f;
  };
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    const int u = 8 * kt + 2 * q;
    weights[(warp * kKeyTiles + kt) * 32 + lane] = make_float4(
        weight(row0, u), weight(row0, u + 1), weight(row0 + 8, u), weight(row0 + 8, u + 1));
  }
  const float hs_unscale = 1.0f / hs_scale;  // a power of two: exact
  const float decay[2] = {__expf(g_s[row0]) * hs_unscale, __expf(g_s[row0 + 8]) * hs_unscale};
  __syncthreads();  // the decays are read: x may replace them

  // The CG state of the thread's rows h = 0, 1 (row0 + 8h): r and x in accumulator order (tile
  // jt holds columns 8 jt + 2q, +1 of both rows), p^ as the f16 A fragments of P.
  float4* const x_s = reinterpret_cast<float4*>(words + Lo::kX) + warp * kN * 32 + lane;
  float r[kN][4], y[kN][4];
  auto at = [&](int field, int h, int jt) {
    return reinterpret_cast<float2*>(rec + field + (row0 + 8 * h) * D + 8 * jt + 2 * q);
  };
#pragma unroll
  for (int jt = 0; jt < kN; ++jt) {
    const float2 r0 = *at(Rec::kR, 0, jt), r1 = *at(Rec::kR, 1, jt);
    const float2 x0 = *at(Rec::kX, 0, jt), x1 = *at(Rec::kX, 1, jt);
    const float2 p0 = *at(Rec::kP, 0, jt), p1 = *at(Rec::kP, 1, jt);
    r[jt][0] = r0.x, r[jt][1] = r0.y, r[jt][2] = r1.x, r[jt][3] = r1.y;
    y[jt][0] = p0.x, y[jt][1] = p0.y, y[jt][2] = p1.x, y[jt][3] = p1.y;
    x_s[jt * 32] = make_float4(x0.x, x0.y, x1.x, x1.y);
  }
  float delta[2], initial_norm[2], scale[2];
  bool active[2];
  int iterations[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int t = row0 + 8 * h;
    delta[h] = rec[Rec::kDelta + t];
    initial_norm[h] = rec[Rec::kInitialNorm + t];
    active[h] = rec[Rec::kActive + t] != 0.0f;
    iterations[h] = static_cast<int>(rec[Rec::kIterations + t]);
  }
  uint32_t ph[kK][4];
  // p^ = s p from p in y, s the power of two that brings the row's largest |p| into [1, 2).
  auto store_p = [&](const bool(&update)[2]) {
    float largest[2] = {0.0f, 0.0f};
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) largest[e / 2] = fmaxf(largest[e / 2], fabsf(y[jt][e]));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // every lane shuffles: rows differ in update
      const float row_largest = RowMax<4>(largest[h]);
      if (update[h]) scale[h] = PowerOfTwoScale(row_largest);
    }
#pragma unroll
    for (int ks = 0; ks < kK; ++ks) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!update[h]) continue;  // a stopped row keeps its last p^: computed, not used
        ph[ks][h] = PackHalves(y[2 * ks][2 * h] * scale[h], y[2 * ks][2 * h + 1] * scale[h]);
        ph[ks][2 + h] =
            PackHalves(y[2 * ks + 1][2 * h] * scale[h], y[2 * ks + 1][2 * h + 1] * scale[h]);
      }
    }
  };
  const bool every_row[2] = {true, true};
  store_p(every_row);

  const uint32_t* const mat = words + Lo::kMat;
  const uint32_t* const keys_t = words + Lo::kKeysT;
  const uint32_t* const keys_h = words + Lo::kKeys;
  const float2* const lambda2 = reinterpret_cast<const float2*>(lambda_s) + q;
  const float4* const w_s = weights + warp * kKeyTiles * 32 + lane;
  // Keys past the warp's last row have zero weight, so the first two warps (rows < 32) skip the
  // second half of S's tiles and of S K's k-steps (a finer cut cost more in branches than it
  // saved in products).
  const bool later_keys = warp >= kHalfWarps / 2;
  constexpr int kHalfTiles = kKeyTiles / 2, kHalfSteps = kKeySteps / 2;
  const int max_iterations = a.table.max_iterations[j];
  for (int it = static_cast<int>(rec[Rec::kIteration]); it < max_iterations; ++it) {
    if (!__any_sync(0xffffffffu, active[0] || active[1])) break;
    // S = P^ K^T, weighted, as the A fragments of S K.
    uint32_t sa[kKeySteps][4];
    {
      float s[kKeyTiles][4] = {};
      auto s_tiles = [&](auto first) {  // S's tiles [first, first + kHalfTiles)
        constexpr int kFirst = decltype(first)::value;
#pragma unroll
        for (int ks = 0; ks < kK; ++ks) {
#pragma unroll
          for (int kt = kFirst; kt < kFirst + kHalfTiles; kt += 2) {
            MmaPair(s[kt], s[kt + 1], ph[ks], LoadFragmentPair(keys_t, ks * kKeyTiles + kt));
          }
        }
#pragma unroll
        for (int kk = kFirst / 2; kk < kFirst / 2 + kHalfSteps; ++kk) {
          const float4 w0 = w_s[2 * kk * 32], w1 = w_s[(2 * kk + 1) * 32];
          const float(&s0)[4] = s[2 * kk];
          const float(&s1)[4] = s[2 * kk + 1];
          sa[kk][0] = PackHalves(s0[0] * w0.x, s0[1] * w0.y);
          sa[kk][1] = PackHalves(s0[2] * w0.z, s0[3] * w0.w);
          sa[kk][2] = PackHalves(s1[0] * w1.x, s1[1] * w1.y);
          sa[kk][3] = PackHalves(s1[2] * w1.z, s1[3] * w1.w);
        }
      };
      s_tiles(std::integral_constant<int, 0>{});
      if (later_keys) s_tiles(std::integral_constant<int, kHalfTiles>{});
    }
    // Y = decay * P^ Hs_c + S K = (A - diag(lambda)) p^.
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) y[jt][0] = y[jt][1] = y[jt][2] = y[jt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kK; ++ks) {
#pragma unroll
      for (int jt = 0; jt < kN; jt += 2) {
        MmaPair(y[jt], y[jt + 1], ph[ks], LoadFragmentPair(mat, ks * kN + jt));
      }
    }
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) {
      y[jt][0] *= decay[0], y[jt][1] *= decay[0], y[jt][2] *= decay[1], y[jt][3] *= decay[1];
    }
    auto key_steps = [&](auto first) {  // S K's k-steps [first, first + kHalfSteps)
      constexpr int kFirst = decltype(first)::value;
#pragma unroll
      for (int kk = kFirst; kk < kFirst + kHalfSteps; ++kk) {
#pragma unroll
        for (int jt = 0; jt < kN; jt += 2) {
          MmaPair(y[jt], y[jt + 1], sa[kk], LoadFragmentPair(keys_h, kk * kN + jt));
        }
      }
    };
    key_steps(std::integral_constant<int, 0>{});
    if (later_keys) key_steps(std::integral_constant<int, kHalfSteps>{});

    // The CG step on p^: y becomes A p^, then p^ as fp32, then the next direction.
    float p_ap[2] = {0.0f, 0.0f};
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) {
      const float2 lambda = lambda2[4 * jt];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 p = Unpack(ph[jt / 2][2 * (jt % 2) + h]);
        y[jt][2 * h] += lambda.x * p.x;
        y[jt][2 * h + 1] += lambda.y * p.y;
        p_ap[h] += p.x * y[jt][2 * h] + p.y * y[jt][2 * h + 1];
      }
    }
    bool step[2];
    float alpha[2], delta_new[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // A is SPD, so (p, A p) <= 0 only when p vanished: the residual is at rounding level.
      p_ap[h] = RowSum<4>(p_ap[h]);
      step[h] = active[h] && p_ap[h] > 0.0f;
      alpha[h] = step[h] ? __fdividef(scale[h] * delta[h], p_ap[h]) : 0.0f;
    }
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) {
      float4 x = x_s[jt * 32];
      float* const xv = &x.x;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 p = Unpack(ph[jt / 2][2 * (jt % 2) + h]);
        xv[2 * h] += alpha[h] * p.x;
        xv[2 * h + 1] += alpha[h] * p.y;
        r[jt][2 * h] -= alpha[h] * y[jt][2 * h];
        r[jt][2 * h + 1] -= alpha[h] * y[jt][2 * h + 1];
        delta_new[h] += r[jt][2 * h] * r[jt][2 * h] + r[jt][2 * h + 1] * r[jt][2 * h + 1];
        y[jt][2 * h] = p.x;
        y[jt][2 * h + 1] = p.y;
      }
      x_s[jt * 32] = x;
    }
    float coefficient[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      delta_new[h] = RowSum<4>(delta_new[h]);
      coefficient[h] = 0.0f;
      if (step[h]) {
        coefficient[h] = __fdividef(delta_new[h], delta[h] * scale[h]);  // beta for p = p^ / s
        delta[h] = delta_new[h];
        iterations[h] = it + 1;
        if (delta[h] == 0.0f) active[h] = false;
      } else {
        active[h] = false;
      }
    }
#pragma unroll
    for (int jt = 0; jt < kN; ++jt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) y[jt][e] = r[jt][e] + coefficient[e / 2] * y[jt][e];
    }
    store_p(step);
  }

  // x for the readout, and the statistics.
#pragma unroll
  for (int jt = 0; jt < kN; ++jt) {
    const float4 x = x_s[jt * 32];
    *at(Rec::kX, 0, jt) = make_float2(x.x, x.y);
    *at(Rec::kX, 1, jt) = make_float2(x.z, x.w);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (q == 0 && row0 + 8 * h < n) {
      AddSolveStats(a, j, head, initial_norm[h], sqrtf(delta[h]), iterations[h], false);
    }
  }
}

}  // namespace

cudaError_t LaunchMesaHalfSolve(const MesaPrefillArgs& a, cudaStream_t stream) {
  return DispatchHeadDim(a.head_dim, [&](auto d) {
    constexpr int D = decltype(d)::value;
    return LaunchWithDynamicSharedMemory(HalfSolveKernel<D>, a.table.num_chunks * a.num_heads,
                                         kHalfThreads, HalfLayout<D>::kTotal * sizeof(uint32_t),
                                         stream, a);
  });
}

}  // namespace ridge::cuda
