#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/gka_recurrence.h"

namespace ridge::cuda {
namespace {

// Below this ||Hs||_F the Chebyshev step would overflow: the head answers as Hs = 0 does
// (kernels/gka_step.cc).
constexpr float kSmallestFrobenius = 1e-30f;
// The spec's L2 norm adds this to the norm; sigmoid(b) + this scales k and v.
constexpr float kL2NormEps = 1e-6f;
constexpr float kBetaEps = 1e-6f;

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

__device__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Two blocks an SM: Hs in registers takes 128 of each thread's (at 170 registers, one block an
// SM ran 1.24x slower; tools/bench/RESULTS.md).
template <int D>
__global__ void __launch_bounds__(2 * D, 2) GkaRecurrenceKernel(GkaRecurrenceArgs a) {
  constexpr int kThreads = 2 * D, kHalf = D / 2;
  __shared__ float key[D], value[D], query[D], readout[D];
  __shared__ __align__(16) float xs[2][D];
  __shared__ float partial[D];
  __shared__ float scratch[kThreads / 32];

  const int seq = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int t = threadIdx.x, row = t >> 1, half = t & 1;
  const int64_t pair = static_cast<int64_t>(seq) * a.counters_stride + head;
  const int32_t first_row = a.sequences.row_begin[seq], tokens = a.sequences.row_count[seq];
  if (tokens == 0) return;
  float* hs = a.state_pool + a.sequences.slot[seq] * a.slot_floats + a.layer_offset +
              static_cast<int64_t>(head) * D * D;
  float* ss = hs + static_cast<int64_t>(a.heads) * D * D;
  const int q_column = (head / (a.heads / a.q_heads)) * D;
  const int k_column = a.q_heads * D + (head / (a.heads / a.k_heads)) * D;
  const int v_column = (a.q_heads + a.k_heads) * D + (head / (a.heads / a.v_heads)) * D;
  const float b_bias = a.b_bias[head], alpha_bias = a.alpha_bias[head];
  const float decay_rate = a.decay_rate[head], dt_bias = a.dt_bias[head];
  const float tolerance = a.sequences.tolerance[seq];
  const int max_iterations = a.sequences.max_iterations[seq];
  const float o_norm_weight = t < D ? a.o_norm[t] : 0.0f;

  // Half a row of Hs per thread, in registers for every token of the step.
  float h[kHalf];
  float4* h_row = reinterpret_cast<float4*>(hs + row * D + half * kHalf);
#pragma unroll
  for (int c = 0; c < kHalf / 4; ++c) {
    const float4 v = h_row[c];
    h[4 * c] = v.x;
    h[4 * c + 1] = v.y;
    h[4 * c + 2] = v.z;
    h[4 * c + 3] = v.w;
  }

  for (int32_t token = 0; token < tokens; ++token) {
    const int64_t r = first_row + token;
    const float* qkv = a.qkv + r * a.qkv_stride;
    const float* proj = a.proj + r * a.proj_stride;
    const float beta = Sigmoid(proj[a.b_column + head] + b_bias) + kBetaEps;
    const float alpha = Sigmoid(proj[a.alpha_column + head] + alpha_bias);
    const float decay = expf(-decay_rate * Softplus(proj[a.a_column + head] + dt_bias));
    const float q_raw = t < D ? qkv[q_column + t] : 0.0f;
    const float k_raw = t < D ? qkv[k_column + t] : 0.0f;
    const float q_scale = 1.0f / (sqrtf(BlockSum<kThreads>(q_raw * q_raw, scratch)) + kL2NormEps);
    const float k_scale = 1.0f / (sqrtf(BlockSum<kThreads>(k_raw * k_raw, scratch)) + kL2NormEps);
    if (t < D) {
      key[t] = beta * k_scale * k_raw;
      value[t] = beta * qkv[v_column + t];
      query[t] = q_scale * q_raw;
    }
    __syncthreads();

    // Hs = decay Hs + k~ k~^T.
    const float k_row = key[row];
    float squares = 0.0f;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      h[c] = decay * h[c] + k_row * key[half * kHalf + c];
      squares += h[c] * h[c];
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
        // Four independent sums: a single chain of kHalf dependent FMAs is the solve's latency.
        const float4* x = reinterpret_cast<const float4*>(xs[buffer] + half * kHalf);
        float dots[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < kHalf / 4; ++c) {
          const float4 x4 = x[c];
          dots[0] += h[4 * c] * x4.x;
          dots[1] += h[4 * c + 1] * x4.y;
          dots[2] += h[4 * c + 2] * x4.z;
          dots[3] += h[4 * c + 3] * x4.w;
        }
        float dot = (dots[0] + dots[1]) + (dots[2] + dots[3]);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
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
  for (int c = 0; c < kHalf / 4; ++c) {
    h_row[c] = make_float4(h[4 * c], h[4 * c + 1], h[4 * c + 2], h[4 * c + 3]);
  }
}

}  // namespace

bool IsGkaHeadDim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchGkaRecurrence(const GkaRecurrenceArgs& args, cudaStream_t stream) {
  if (!IsGkaHeadDim(args.head_dim)) return cudaErrorInvalidValue;
  const int blocks = args.num_sequences * args.heads;
  if (blocks == 0) return cudaSuccess;
  if (args.head_dim == 64) {
    GkaRecurrenceKernel<64><<<blocks, 128, 0, stream>>>(args);
  } else {
    GkaRecurrenceKernel<128><<<blocks, 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace ridge::cuda
