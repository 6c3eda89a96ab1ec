#include <cmath>

#include "kernels/cuda/gka_decode.h"

namespace ridge::cuda {
namespace {

// Below this ||Hs||_F the Chebyshev step would overflow: the head answers as Hs = 0 does
// (kernels/gka_step.cc).
constexpr float kSmallestFrobenius = 1e-30f;

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

template <int D>
__global__ void __launch_bounds__(2 * D) GkaDecodeKernel(GkaDecodeArgs a) {
  constexpr int kThreads = 2 * D, kHalf = D / 2;
  __shared__ float key[D], value[D], query[D], readout[D];
  __shared__ float xs[2][D];
  __shared__ float partial[D];
  __shared__ float scratch[kThreads / 32];

  const int seq = blockIdx.x / a.heads, head = blockIdx.x % a.heads;
  const int t = threadIdx.x, row = t >> 1, half = t & 1;
  const int64_t pair = static_cast<int64_t>(seq) * a.heads + head;
  float* hs = a.state_pool + a.slot[seq] * a.slot_floats + a.layer_offset +
              static_cast<int64_t>(head) * D * D;
  float* ss = hs + static_cast<int64_t>(a.heads) * D * D;
  const float beta = a.beta[pair], alpha = a.alpha[pair];
  const float decay = expf(a.log_decay[pair]);
  if (t < D) {
    key[t] = beta * a.k[pair * D + t];
    value[t] = beta * a.v[pair * D + t];
    query[t] = a.q[pair * D + t];
  }
  __syncthreads();

  // Hs = decay Hs + k~ k~^T: half a row per thread, kept in registers for the solve.
  float h[kHalf];
  float4* h_row = reinterpret_cast<float4*>(hs + row * D + half * kHalf);
  const float k_row = key[row];
  float squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kHalf / 4; ++c) {
    float4 v = h_row[c];
    const int col = half * kHalf + 4 * c;
    v.x = decay * v.x + k_row * key[col];
    v.y = decay * v.y + k_row * key[col + 1];
    v.z = decay * v.z + k_row * key[col + 2];
    v.w = decay * v.w + k_row * key[col + 3];
    h_row[c] = v;
    h[4 * c] = v.x;
    h[4 * c + 1] = v.y;
    h[4 * c + 2] = v.z;
    h[4 * c + 3] = v.w;
    squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
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
    const float tolerance = a.tolerance[seq];
    const int max_iterations = a.max_iterations[seq];
    const float q_norm2 = BlockSum<kThreads>(half == 0 ? q_row * q_row : 0.0f, scratch);
    float x_prev = 0.0f, w = 2.0f;
    x_row = step * q_row;
    if (half == 0) xs[0][row] = x_row;
    __syncthreads();
    int buffer = 0;
    for (int iteration = 0;; ++iteration) {
      const float* x = xs[buffer] + half * kHalf;
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kHalf; ++c) dot += h[c] * x[c];
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
  if (rows_half == 0) a.out[pair * D + j] = (acc + partial[j]) * rsqrtf(static_cast<float>(D));

  if (t == 0 && a.solve) {
    a.counters[pair].Add(iterations, capped, relative_residual);
  }
}

}  // namespace

bool IsGkaDecodeHeadDim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchGkaDecode(const GkaDecodeArgs& args, cudaStream_t stream) {
  if (!IsGkaDecodeHeadDim(args.head_dim)) return cudaErrorInvalidValue;
  const int blocks = args.num_sequences * args.heads;
  if (blocks == 0) return cudaSuccess;
  if (args.head_dim == 64) {
    GkaDecodeKernel<64><<<blocks, 128, 0, stream>>>(args);
  } else {
    GkaDecodeKernel<128><<<blocks, 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace ridge::cuda
