// Device code shared by the paged attention decode kernels (kernels/cuda/paged_attention.cu and
// paged_attention_tiles.cu): loads, a row's keys, and the block's merge of its partial softmaxes.
// Internal to those files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/paged_attention.h"

namespace ridge::cuda::paged_attention_internal {

inline constexpr int kWarps = 4;
// Keys a warp of the tile kernels takes at a time (and the granule of a row's splits).
inline constexpr int kTile = 16;
inline constexpr float kLog2e = 1.4426950408889634f;

__device__ inline void LoadBf16x8(const __nv_bfloat16* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ inline void LoadF32x8(const float* p, float* out) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
// How many blocks of `kernel` (`threads` each, `shared_bytes` of dynamic shared memory) an SM
// holds at once; 1 when the runtime cannot say (the split pick then gives more splits than
// needed, still correct). Callers ask once per kernel and keep the answer: a split pick runs for
// every attention layer of every step.
inline int ResidentBlocksPerSm(const void* kernel, int threads, size_t shared_bytes) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return blocks > 0 ? blocks : 1;
}

struct RowKeys {
  int64_t first = 0, end = 0;  // the row's keys: positions [first, end)
};

// The keys each split of a row of `keys` keys takes: the keys spread evenly over `max_splits`
// splits, in whole tiles (every split but the last the same length), so that a row's blocks
// take alike whatever its length; the last splits of a short row may have none.
__host__ __device__ inline int64_t RowSplitKeys(int64_t keys, int32_t max_splits) {
  const int64_t even = (keys + max_splits - 1) / max_splits;
  const int64_t tiles = (even + kTile - 1) / kTile;
  return (tiles > 1 ? tiles : 1) * kTile;
}

// Keys [first, end) of split `split` of the row.
__device__ inline RowKeys SplitKeysOf(const PagedAttentionArgs& a, RowKeys row, int split) {
  const int64_t length = RowSplitKeys(row.end - row.first, a.max_splits);
  RowKeys keys;
  keys.first = row.first + split * length;
  keys.end = min(keys.first + length, row.end);
  return keys;
}

__device__ inline RowKeys KeysOf(const PagedAttentionArgs& a, int r, int seq) {
  const int64_t position = a.step.start_position[seq] + (r - a.step.row_begin[seq]);
  const int64_t window = a.ring.window;
  RowKeys keys;
  keys.first =
      a.ring.state_pool != nullptr && position - window + 1 > 0 ? position - window + 1 : 0;
  keys.end = position + 1;
  return keys;
}
// Merges the block's partial softmaxes (one per lane group or warp, after a barrier) and writes
// the row's output for the kv head's query heads (a single split) or the split's partial.
template <int D, int G, int kParts>
__device__ void WriteBlockResult(const PagedAttentionArgs& a, const float (*part_max)[G],
                                 const float (*part_sum)[G], const float (*part_acc)[G][D], int r,
                                 int kv_head, int split) {
  const int64_t q_width = static_cast<int64_t>(a.q_heads);
  for (int index = threadIdx.x; index < G * D; index += blockDim.x) {
    const int h = index / D, d = index % D;
    float block_max = -INFINITY;
#pragma unroll
    for (int g = 0; g < kParts; ++g) block_max = fmaxf(block_max, part_max[g][h]);
    float sum = 0.0f, value = 0.0f;
    if (block_max != -INFINITY) {
#pragma unroll
      for (int g = 0; g < kParts; ++g) {
        const float weight = exp2f(part_max[g][h] - block_max);
        sum += part_sum[g][h] * weight;
        value += part_acc[g][h][d] * weight;
      }
    }
    const int q_head = kv_head * G + h;
    if (gridDim.x == 1) {
      static_cast<__nv_bfloat16*>(a.out_bf16)[r * a.out_stride + q_head * D + d] =
          __float2bfloat16(value / sum);
    } else {
      const int64_t entry = (r * q_width + q_head) * a.max_splits + split;
      const int64_t stats = static_cast<int64_t>(a.step.rows) * q_width * a.max_splits;
      a.partials[2 * stats + entry * D + d] = value;
      if (d == 0) {
        a.partials[entry] = block_max;
        a.partials[stats + entry] = sum;
      }
    }
  }
}

// The tile kernel for blocks of a multiple of 16 tokens and splits of a multiple of 16 keys
// (bf16 or fp8 blocks, a.paged.fp8); paged_attention_tiles.cu instantiates it for head_dim 64 and
// 128 and groups 1, 2, 4 and 8.
template <int D, int G>
cudaError_t LaunchTileAttention(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream);
// Its fp8 form, on the tensor cores (paged_attention_fp8_tiles.cu), the same shapes.
template <int D, int G>
cudaError_t LaunchFp8TileAttention(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream);
// How many blocks of the tile kernel (bf16 or fp8) an SM holds at once.
template <int D, int G>
int TileAttentionBlocksPerSm(bool fp8);
template <int D, int G>
int Fp8TileAttentionBlocksPerSm();

}  // namespace ridge::cuda::paged_attention_internal
