#include "kernels/cuda/causal_conv.h"

namespace ridge::cuda {
namespace {

__device__ float Silu(float x) { return x / (1.0f + expf(-x)); }

template <int W>
__global__ void CausalConvSiluKernel(CausalConvArgs a) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int seq = blockIdx.y;
  if (c >= a.channels) return;
  const int32_t first = a.row_begin[seq], n = a.row_count[seq];
  if (n == 0) return;
  float* tail = a.state_pool + a.slot[seq] * a.slot_floats + a.tail_offset;
  float weight[W], window[W];  // window[W - 1]: the current token
#pragma unroll
  for (int j = 0; j < W; ++j) weight[j] = a.weight[static_cast<int64_t>(c) * W + j];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) window[j] = tail[static_cast<int64_t>(j) * a.channels + c];
  for (int32_t t = 0; t < n; ++t) {
    const int64_t r = first + t;
    window[W - 1] = a.in[r * a.in_stride + c];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < W; ++j) sum += weight[j] * window[j];
    a.out[r * a.out_stride + c] = Silu(sum);
#pragma unroll
    for (int j = 0; j < W - 1; ++j) window[j] = window[j + 1];
  }
#pragma unroll
  for (int j = 0; j < W - 1; ++j) tail[static_cast<int64_t>(j) * a.channels + c] = window[j];
}

template <int W>
cudaError_t Launch(const CausalConvArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 128;
  const dim3 grid((a.channels + kThreads - 1) / kThreads, a.num_sequences);
  CausalConvSiluKernel<W><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCausalConvSilu(const CausalConvArgs& args, cudaStream_t stream) {
  if (args.num_sequences == 0 || args.channels == 0) return cudaSuccess;
  switch (args.width) {
    case 1:
      return Launch<1>(args, stream);
    case 2:
      return Launch<2>(args, stream);
    case 3:
      return Launch<3>(args, stream);
    case 4:
      return Launch<4>(args, stream);
    case 5:
      return Launch<5>(args, stream);
    case 6:
      return Launch<6>(args, stream);
    case 7:
      return Launch<7>(args, stream);
    case 8:
      return Launch<8>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ridge::cuda
