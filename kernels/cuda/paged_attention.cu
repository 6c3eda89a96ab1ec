#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/paged_attention.h"

namespace ridge::cuda {
namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
// A split never takes fewer keys than this (its partial costs a write and a read).
constexpr int64_t kMinSplitKeys = 512;

__device__ void LoadBf16x8(const __nv_bfloat16* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ void LoadF32x8(const float* p, float* out) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

struct RowKeys {
  int64_t first = 0, end = 0;  // the row's keys: positions [first, end)
};

__device__ RowKeys KeysOf(const PagedAttentionArgs& a, int r, int seq) {
  const int64_t position = a.step.start_position[seq] + (r - a.step.row_begin[seq]);
  const int64_t window = a.ring.window;
  RowKeys keys;
  keys.first =
      a.ring.state_pool != nullptr && position - window + 1 > 0 ? position - window + 1 : 0;
  keys.end = position + 1;
  return keys;
}

// Eight dimensions [sub * 8, sub * 8 + 8) of the key and the value at `position`.
template <int D, bool kPaged>
__device__ void LoadKeyValue(const PagedAttentionArgs& a, int seq, int kv_head, int64_t position,
                             int sub, float* key, float* value) {
  if constexpr (kPaged) {
    const int32_t bs = a.paged.block_size;
    const int32_t block = a.step.block_tables[a.step.table_begin[seq] + position / bs];
    const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(a.paged.cache) +
                                block * a.paged.block_elements + a.paged.layer_offset;
    const int64_t at = (static_cast<int64_t>(kv_head) * bs + position % bs) * D + sub * 8;
    LoadBf16x8(base + at, key);
    LoadBf16x8(base + static_cast<int64_t>(a.kv_heads) * bs * D + at, value);
  } else {
    const int64_t kv_width = static_cast<int64_t>(a.kv_heads) * D;
    const int32_t chunk_start = a.step.start_position[seq];
    const float* k;
    int64_t value_offset;
    if (position < chunk_start) {
      k = a.ring.state_pool + a.step.slot[seq] * a.ring.slot_floats + a.ring.ring_offset +
          (position % a.ring.window) * kv_width;
      value_offset = a.ring.window * kv_width;
    } else {
      const int64_t row = a.step.row_begin[seq] + (position - chunk_start);
      k = a.proj + row * a.proj_stride + static_cast<int64_t>(a.q_heads) * D;
      value_offset = kv_width;
    }
    k += kv_head * D + sub * 8;
    LoadF32x8(k, key);
    LoadF32x8(k + value_offset, value);
  }
}

template <int D, int G, bool kPaged>
__global__ void __launch_bounds__(32 * kWarps) AttentionKernel(PagedAttentionArgs a) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kGroups = kWarps * kKeysPerWarp;  // keys in flight per block
  __shared__ float group_max[kGroups][G], group_sum[kGroups][G];
  __shared__ float group_acc[kGroups][G][D];

  const int split = blockIdx.x, kv_head = blockIdx.y, r = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane % kLanesPerKey, group = warp * kKeysPerWarp + lane / kLanesPerKey;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const int64_t first = keys.first + static_cast<int64_t>(split) * a.split_keys;
  const int64_t end = min(first + a.split_keys, keys.end);

  float q[G][8], acc[G][8], m[G], l[G];
  const float* q_row = a.proj + static_cast<int64_t>(r) * a.proj_stride;
#pragma unroll
  for (int h = 0; h < G; ++h) {
    LoadF32x8(q_row + (kv_head * G + h) * D + sub * 8, q[h]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      q[h][e] *= a.scale * kLog2e;
      acc[h][e] = 0.0f;
    }
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  for (int64_t base = first; base < end; base += kGroups) {
    const int64_t position = base + group;
    const bool valid = position < end;
    float key[8], value[8];
    if (valid) {
      LoadKeyValue<D, kPaged>(a, seq, kv_head, position, sub, key, value);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) key[e] = value[e] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float score = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) score += q[h][e] * key[e];
#pragma unroll
      for (int offset = kLanesPerKey / 2; offset > 0; offset >>= 1) {
        score += __shfl_xor_sync(0xffffffffu, score, offset);
      }
      if (valid) {
        const float new_max = fmaxf(m[h], score);
        const float correction = exp2f(m[h] - new_max), p = exp2f(score - new_max);
        l[h] = l[h] * correction + p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = acc[h][e] * correction + p * value[e];
        m[h] = new_max;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int e = 0; e < 8; ++e) group_acc[group][h][sub * 8 + e] = acc[h][e];
    if (sub == 0) {
      group_max[group][h] = m[h];
      group_sum[group][h] = l[h];
    }
  }
  __syncthreads();

  const int64_t q_width = static_cast<int64_t>(a.q_heads);
  for (int index = threadIdx.x; index < G * D; index += 32 * kWarps) {
    const int h = index / D, d = index % D;
    float block_max = -INFINITY;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) block_max = fmaxf(block_max, group_max[g][h]);
    float sum = 0.0f, value = 0.0f;
    if (block_max != -INFINITY) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const float weight = exp2f(group_max[g][h] - block_max);
        sum += group_sum[g][h] * weight;
        value += group_acc[g][h][d] * weight;
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

// Merges a row's splits: one block per (row, query head), a thread per dimension.
__global__ void MergeSplitsKernel(PagedAttentionArgs a) {
  const int r = blockIdx.x, q_head = blockIdx.y, d = threadIdx.x;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const int splits = static_cast<int>((keys.end - keys.first + a.split_keys - 1) / a.split_keys);
  const int64_t stats = static_cast<int64_t>(a.step.rows) * a.q_heads * a.max_splits;
  const int64_t entry0 = (static_cast<int64_t>(r) * a.q_heads + q_head) * a.max_splits;
  float merged_max = -INFINITY;
  for (int s = 0; s < splits; ++s) merged_max = fmaxf(merged_max, a.partials[entry0 + s]);
  float sum = 0.0f, value = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float weight = exp2f(a.partials[entry0 + s] - merged_max);
    sum += a.partials[stats + entry0 + s] * weight;
    value += a.partials[2 * stats + (entry0 + s) * a.head_dim + d] * weight;
  }
  static_cast<__nv_bfloat16*>(a.out_bf16)[r * a.out_stride + q_head * a.head_dim + d] =
      __float2bfloat16(value / sum);
}

template <int D, int G>
cudaError_t LaunchFor(const PagedAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(a.max_splits, a.kv_heads, a.step.rows);
  if (a.paged.cache != nullptr) {
    AttentionKernel<D, G, true><<<grid, 32 * kWarps, 0, stream>>>(a);
  } else {
    AttentionKernel<D, G, false><<<grid, 32 * kWarps, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchForHeadDim(const PagedAttentionArgs& a, cudaStream_t stream) {
  switch (a.q_heads / a.kv_heads) {
    case 1:
      return LaunchFor<D, 1>(a, stream);
    case 2:
      return LaunchFor<D, 2>(a, stream);
    case 4:
      return LaunchFor<D, 4>(a, stream);
    case 8:
      return LaunchFor<D, 8>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

int64_t PagedAttentionScratchFloats(int64_t rows, int64_t q_heads, int64_t head_dim,
                                    int64_t max_splits) {
  return max_splits <= 1 ? 0 : rows * q_heads * max_splits * (2 + head_dim);
}

int32_t PickAttentionSplits(int64_t rows, int64_t kv_heads, int64_t max_keys, int32_t sm_count,
                            int32_t* split_keys) {
  const int64_t target_blocks = 8 * static_cast<int64_t>(sm_count);
  const int64_t base = std::max<int64_t>(1, rows * kv_heads);
  int64_t splits = (target_blocks + base - 1) / base;
  splits = std::min(splits, (max_keys + kMinSplitKeys - 1) / kMinSplitKeys);
  splits = std::max<int64_t>(splits, 1);
  int64_t keys = (max_keys + splits - 1) / splits;
  keys = (keys + 63) / 64 * 64;
  *split_keys = static_cast<int32_t>(std::max<int64_t>(keys, 64));
  return static_cast<int32_t>((max_keys + *split_keys - 1) / *split_keys);
}

bool PagedAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (kv_heads <= 0 || q_heads % kv_heads != 0) return false;
  const int32_t group = q_heads / kv_heads;
  return group == 1 || group == 2 || group == 4 || group == 8;
}

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  if (args.step.rows == 0) return cudaSuccess;
  if (!PagedAttentionSupports(args.q_heads, args.kv_heads, args.head_dim) || args.split_keys <= 0 ||
      args.max_splits < 1) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t launched = args.head_dim == 64 ? LaunchForHeadDim<64>(args, stream)
                                                   : LaunchForHeadDim<128>(args, stream);
  if (launched != cudaSuccess || args.max_splits == 1) return launched;
  MergeSplitsKernel<<<dim3(args.step.rows, args.q_heads), args.head_dim, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
