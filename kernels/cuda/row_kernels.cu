#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/row_kernels.h"

namespace ridge::cuda {
namespace {

constexpr int kThreads = 256;

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

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
                                int64_t first_id, int64_t table_rows, float* out) {
  const int64_t row = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[row]) - first_id;
  if (id < 0 || id >= table_rows) {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[row * cols + c] = 0.0f;
    return;
  }
  const __nv_bfloat16* src = table + id * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    out[row * cols + c] = __bfloat162float(src[c]);
  }
}

// Four consecutive bf16 values as one 8-byte store (the address must be 8-byte aligned).
__device__ __forceinline__ void StoreBf16x4(__nv_bfloat16* out, float a, float b, float c,
                                            float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
  uint2 packed;
  packed.x = *reinterpret_cast<const uint32_t*>(&lo);
  packed.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(out) = packed;
}

// kVec: 4 when cols is a multiple of 4 (rows then float4-aligned; one 16-byte load per 4
// columns), else 1. The second pass rereads the row from L1. (Scalar loads took 73 us per
// RMSNorm of a 1B prefill layer at 8 x 2048 on an H200, 40% of the DRAM peak.)
template <int kVec>
__global__ void RmsNormKernel(const float* in, const int32_t* row_index, const float* weight,
                              int64_t cols, float eps, __nv_bfloat16* out) {
  WaitForPreviousKernel();
  const int64_t row = blockIdx.x;
  const float* src = in + (row_index != nullptr ? row_index[row] : row) * cols;
  __nv_bfloat16* dst = out + row * cols;
  float sum = 0.0f;
  if constexpr (kVec == 4) {
    const float4* src4 = reinterpret_cast<const float4*>(src);
    for (int64_t c = threadIdx.x; c < cols / 4; c += kThreads) {
      const float4 v = src4[c];
      sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float scale = rsqrtf(BlockSum(sum) / static_cast<float>(cols) + eps);
    const float4* weight4 = reinterpret_cast<const float4*>(weight);
    for (int64_t c = threadIdx.x; c < cols / 4; c += kThreads) {
      const float4 v = src4[c], w = weight4[c];
      StoreBf16x4(dst + 4 * c, v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z,
                  v.w * scale * w.w);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) sum += src[c] * src[c];
    const float scale = rsqrtf(BlockSum(sum) / static_cast<float>(cols) + eps);
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      dst[c] = __float2bfloat16(src[c] * scale * weight[c]);
    }
  }
}

// out[row][c] = silu(in[row][c]) * in[row][inter + c], a thread per kVec columns (4 when inter
// is a multiple of 4: 16-byte loads, an 8-byte store; else 1). (A thread per column took 401 us
// of a 1B prefill layer at 8 x 2048 on an H200, a third of the DRAM peak.)
template <int kVec>
__global__ void SwiGluKernel(const float* in, int64_t rows, int64_t inter, __nv_bfloat16* out) {
  WaitForPreviousKernel();
  const int64_t groups = inter / kVec;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * groups) return;
  const int64_t row = i / groups, col = (i % groups) * kVec;
  const float* gate = in + row * 2 * inter + col;
  auto silu_times = [](float g, float u) { return g / (1.0f + __expf(-g)) * u; };
  if constexpr (kVec == 4) {
    const float4 g = *reinterpret_cast<const float4*>(gate);
    const float4 u = *reinterpret_cast<const float4*>(gate + inter);
    StoreBf16x4(out + row * inter + col, silu_times(g.x, u.x), silu_times(g.y, u.y),
                silu_times(g.z, u.z), silu_times(g.w, u.w));
  } else {
    out[row * inter + col] = __float2bfloat16(silu_times(gate[0], gate[inter]));
  }
}

// Greedy picks: a thread-block cluster of kArgmaxBlocks blocks a row, each taking a slice with
// kArgmaxLoads loads a thread in flight; block 0 of the cluster reduces the blocks' winners
// through distributed shared memory. (One block a row took 15 us for a 50257-token row on an
// H200, a chain of dependent memory round trips.)
constexpr int kArgmaxBlocks = 8;
constexpr int kArgmaxThreads = 512;
constexpr int kArgmaxLoads = 8;
constexpr int kMaxGridRows = 65535;  // gridDim.y's limit; more rows loop

struct Candidate {
  float value;
  int32_t index;
};

// The larger value, the lower index on ties. A candidate's value is never NaN (a logit only
// enters by comparing greater than one), so NaN never wins, as in GreedyToken.
__device__ __forceinline__ Candidate Better(Candidate a, Candidate b) {
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__device__ __forceinline__ Candidate WarpBest(Candidate c) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    c = Better(c, {__shfl_xor_sync(0xffffffffu, c.value, offset),
                   __shfl_xor_sync(0xffffffffu, c.index, offset)});
  }
  return c;
}

__global__ void __cluster_dims__(kArgmaxBlocks, 1, 1) __launch_bounds__(kArgmaxThreads)
    ArgmaxRowsKernel(const float* logits, int64_t rows, int64_t cols, int64_t stride,
                     int32_t* out) {
  constexpr int kWarps = kArgmaxThreads / 32;
  constexpr Candidate kNothing = {-INFINITY, 0};  // GreedyToken's 0 when nothing beats -inf
  __shared__ Candidate warp_best[kWarps];
  __shared__ Candidate block_best;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  WaitForPreviousKernel();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t slice = (cols + kArgmaxBlocks - 1) / kArgmaxBlocks;
  const int64_t begin = blockIdx.x * slice, end = min(cols, begin + slice);
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {  // the same for the cluster
    const float* values = logits + row * stride;
    Candidate best = kNothing;
    for (int64_t base = begin + threadIdx.x; base < end; base += kArgmaxLoads * kArgmaxThreads) {
      float v[kArgmaxLoads];
#pragma unroll
      for (int j = 0; j < kArgmaxLoads; ++j) {
        const int64_t c = base + j * kArgmaxThreads;
        v[j] = c < end ? values[c] : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kArgmaxLoads; ++j) {  // ascending indices: strictly greater keeps the
        if (v[j] > best.value) {                // lowest among a thread's equal values
          best = {v[j], static_cast<int32_t>(base + j * kArgmaxThreads)};
        }
      }
    }
    best = WarpBest(best);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
      best = WarpBest(lane < kWarps ? warp_best[lane] : kNothing);
      if (lane == 0) block_best = best;
    }
    cluster.sync();  // every block's winner is in its shared memory
    if (cluster.block_rank() == 0 && warp == 0) {
      best =
          WarpBest(lane < kArgmaxBlocks ? *cluster.map_shared_rank(&block_best, lane) : kNothing);
      if (lane == 0) out[row] = best.index;
    }
    cluster.sync();  // block 0 has read them: they may be overwritten, or the blocks exit
  }
}

}  // namespace

cudaError_t LaunchEmbedRows(const int32_t* ids, const void* table_bf16, int64_t rows, int64_t cols,
                            float* out, cudaStream_t stream, int64_t first_id, int64_t table_rows) {
  if (rows == 0) return cudaSuccess;
  EmbedRowsKernel<<<rows, kThreads, 0, stream>>>(ids, static_cast<const __nv_bfloat16*>(table_bf16),
                                                 cols, first_id, table_rows, out);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormToBf16(const float* in, const int32_t* row_index, const float* weight,
                                int64_t rows, int64_t cols, float eps, void* out_bf16,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // Launched to overlap the tail of the product before it (see dependent_launch.h).
  const bool vec4 = cols % 4 == 0 && Aligned(in, 16) && Aligned(weight, 16) && Aligned(out_bf16, 8);
  return LaunchDependent(vec4 ? RmsNormKernel<4> : RmsNormKernel<1>,
                         dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, in,
                         row_index, weight, cols, eps, static_cast<__nv_bfloat16*>(out_bf16));
}

cudaError_t LaunchSwiGlu(const float* in, int64_t rows, int64_t inter, void* out_bf16,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int vec = inter % 4 == 0 && Aligned(in, 16) && Aligned(out_bf16, 8) ? 4 : 1;
  const int64_t blocks = (rows * inter / vec + kThreads - 1) / kThreads;
  return LaunchDependent(vec == 4 ? SwiGluKernel<4> : SwiGluKernel<1>,
                         dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, in, rows,
                         inter, static_cast<__nv_bfloat16*>(out_bf16));
}

cudaError_t LaunchArgmaxRows(const float* logits, int64_t rows, int64_t cols, int64_t stride,
                             int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const dim3 grid(kArgmaxBlocks, static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridRows)));
  // Launched to overlap the tail of the product before it (see dependent_launch.h).
  return LaunchDependent(ArgmaxRowsKernel, grid, dim3(kArgmaxThreads), 0, stream, logits, rows,
                         cols, stride, out);
}

}  // namespace ridge::cuda
