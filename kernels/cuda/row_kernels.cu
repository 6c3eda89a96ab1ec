#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/row_kernels.h"

namespace ridge::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  return total;
}

__global__ void EmbedRowsKernel(const int32_t* ids, const __nv_bfloat16* table, int64_t cols,
                                float* out) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = table + static_cast<int64_t>(ids[row]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    out[row * cols + c] = __bfloat162float(src[c]);
  }
}

__global__ void RmsNormKernel(const float* in, const int32_t* row_index, const float* weight,
                              int64_t cols, float eps, __nv_bfloat16* out) {
  WaitForPreviousKernel();
  const int64_t row = blockIdx.x;
  const float* src = in + (row_index != nullptr ? row_index[row] : row) * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) sum += src[c] * src[c];
  const float scale = rsqrtf(BlockSum(sum) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    out[row * cols + c] = __float2bfloat16(src[c] * scale * weight[c]);
  }
}

__global__ void SwiGluKernel(const float* in, int64_t rows, int64_t inter, __nv_bfloat16* out) {
  WaitForPreviousKernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * inter) return;
  const int64_t row = i / inter, col = i % inter;
  const float g = in[row * 2 * inter + col];
  out[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * in[row * 2 * inter + inter + col]);
}

__global__ void ArgmaxRowsKernel(const float* logits, int64_t cols, int64_t stride, int32_t* out) {
  __shared__ float best_value[kThreads];
  __shared__ int32_t best_index[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * stride;
  float value = -INFINITY;  // GreedyToken's rule: 0 when no logit beats -inf; NaN never wins
  int32_t index = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    if (row[c] > value) {  // strictly greater: the lowest index wins within a thread
      value = row[c];
      index = static_cast<int32_t>(c);
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float other = best_value[threadIdx.x + stride];
      const int32_t other_index = best_index[threadIdx.x + stride];
      if (other > best_value[threadIdx.x] ||
          (other == best_value[threadIdx.x] && other_index < best_index[threadIdx.x])) {
        best_value[threadIdx.x] = other;
        best_index[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_index[0];
}

}  // namespace

cudaError_t LaunchEmbedRows(const int32_t* ids, const void* table_bf16, int64_t rows, int64_t cols,
                            float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  EmbedRowsKernel<<<rows, kThreads, 0, stream>>>(ids, static_cast<const __nv_bfloat16*>(table_bf16),
                                                 cols, out);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormToBf16(const float* in, const int32_t* row_index, const float* weight,
                                int64_t rows, int64_t cols, float eps, void* out_bf16,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // Launched to overlap the tail of the product before it (see dependent_launch.h).
  return LaunchDependent(RmsNormKernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0,
                         stream, in, row_index, weight, cols, eps,
                         static_cast<__nv_bfloat16*>(out_bf16));
}

cudaError_t LaunchSwiGlu(const float* in, int64_t rows, int64_t inter, void* out_bf16,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows * inter + kThreads - 1) / kThreads;
  return LaunchDependent(SwiGluKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                         stream, in, rows, inter, static_cast<__nv_bfloat16*>(out_bf16));
}

cudaError_t LaunchArgmaxRows(const float* logits, int64_t rows, int64_t cols, int64_t stride,
                             int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  ArgmaxRowsKernel<<<rows, kThreads, 0, stream>>>(logits, cols, stride, out);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
