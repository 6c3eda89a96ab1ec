// Paged attention decode (kernels/cuda/paged_attention.h): the generic kernel (sliding-window
// rings, blocks not a multiple of 16 tokens), the merge of splits and the launch; the tile kernel
// for full-attention blocks lives in paged_attention_tiles.cu.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_common.cuh"

namespace ridge::cuda {
namespace {

using namespace paged_attention_internal;  // NOLINT: this file's own internals

// A split never takes fewer keys than this (its partial costs a write and a read), and a row
// has at most kMaxSplits.
constexpr int64_t kMinSplitKeys = 512;
constexpr int32_t kMaxSplits = 64;

// Eight dimensions [sub * 8, sub * 8 + 8) of a key and its value as stored: bf16 in the KV
// blocks, fp32 in the ring and the step's rows. Loaded for several keys before any is used, so
// a warp has that many loads in flight.
template <bool kPaged>
struct RawKeyValue;
template <>
struct RawKeyValue<true> {
  uint4 key, value;
  __device__ void ToFloat(float* k, float* v) const {
    LoadBf16x8(reinterpret_cast<const __nv_bfloat16*>(&key), k);
    LoadBf16x8(reinterpret_cast<const __nv_bfloat16*>(&value), v);
  }
};
template <>
struct RawKeyValue<false> {
  float4 key[2], value[2];
  __device__ void ToFloat(float* k, float* v) const {
    LoadF32x8(reinterpret_cast<const float*>(key), k);
    LoadF32x8(reinterpret_cast<const float*>(value), v);
  }
};

template <int D, bool kPaged>
__device__ RawKeyValue<kPaged> LoadKeyValue(const PagedAttentionArgs& a, int seq, int kv_head,
                                            int64_t position, int sub) {
  RawKeyValue<kPaged> raw;
  if constexpr (kPaged) {
    const int32_t bs = a.paged.block_size;
    const int32_t block = a.step.block_tables[a.step.table_begin[seq] + position / bs];
    const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(a.paged.cache) +
                                block * a.paged.block_elements + a.paged.layer_offset;
    const int64_t at = (static_cast<int64_t>(kv_head) * bs + position % bs) * D + sub * 8;
    raw.key = *reinterpret_cast<const uint4*>(base + at);
    raw.value =
        *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(a.kv_heads) * bs * D + at);
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
    raw.key[0] = reinterpret_cast<const float4*>(k)[0];
    raw.key[1] = reinterpret_cast<const float4*>(k)[1];
    raw.value[0] = reinterpret_cast<const float4*>(k + value_offset)[0];
    raw.value[1] = reinterpret_cast<const float4*>(k + value_offset)[1];
  }
  return raw;
}
template <int D, int G, bool kPaged>
__global__ void __launch_bounds__(32 * kWarps) AttentionKernel(PagedAttentionArgs a) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kGroups = kWarps * kKeysPerWarp;  // keys in flight per block
  __shared__ float group_max[kGroups][G], group_sum[kGroups][G];
  __shared__ float group_acc[kGroups][G][D];

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int r = a.row_list != nullptr ? a.row_list[blockIdx.z] : blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane % kLanesPerKey, group = warp * kKeysPerWarp + lane / kLanesPerKey;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const RowKeys span = SplitKeysOf(a, keys, split);
  const int64_t first = span.first, end = span.end;

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
  // kUnroll keys per lane group per pass: their loads first, then one softmax rescale for all.
  constexpr int kUnroll = kPaged ? 4 : 2;
  for (int64_t base = first; base < end; base += kGroups * kUnroll) {
    RawKeyValue<kPaged> raw[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t position = base + u * kGroups + group;
      valid[u] = position < end;
      if (valid[u]) raw[u] = LoadKeyValue<D, kPaged>(a, seq, kv_head, position, sub);
    }
    float score[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float key[8], unused[8];
      raw[u].ToFloat(key, unused);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += q[h][e] * key[e];
#pragma unroll
        for (int offset = kLanesPerKey / 2; offset > 0; offset >>= 1) {
          dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        }
        score[u][h] = valid[u] ? dot : -INFINITY;
      }
    }
    if (!valid[0]) continue;  // this lane group has no key in the pass (nor in later ones)
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float new_max = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) new_max = fmaxf(new_max, score[u][h]);
      const float correction = exp2f(m[h] - new_max);
      l[h] *= correction;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= correction;
      m[h] = new_max;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!valid[u]) continue;
      float unused[8], value[8];
      raw[u].ToFloat(unused, value);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float p = exp2f(score[u][h] - m[h]);
        l[h] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] += p * value[e];
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

  WriteBlockResult<D, G, kGroups>(a, group_max, group_sum, group_acc, r, kv_head, split);
}
// Merges a row's splits: one block per (row, query head), a thread per dimension.
__global__ void MergeSplitsKernel(PagedAttentionArgs a) {
  const int r = a.row_list != nullptr ? a.row_list[blockIdx.x] : blockIdx.x;
  const int q_head = blockIdx.y, d = threadIdx.x;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const int64_t length = RowSplitKeys(keys.end - keys.first, a.max_splits);
  const int splits = static_cast<int>((keys.end - keys.first + length - 1) / length);
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
  const dim3 grid(a.max_splits, a.kv_heads, a.row_list != nullptr ? a.row_list_size : a.step.rows);
  const bool tiles = a.paged.block_size % kTile == 0;
  if (a.paged.cache != nullptr && (tiles || a.paged.fp8)) {
    // fp8 blocks are read by the tile kernel only.
    if (!tiles) return cudaErrorInvalidValue;
    return LaunchTileAttention<D, G>(a, grid, stream);
  } else if (a.paged.cache != nullptr) {
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

template <int D, int G>
int BlocksPerSmFor(const AttentionSplitShape& shape) {
  if (shape.paged && (shape.block_size % kTile == 0 || shape.fp8)) {
    return TileAttentionBlocksPerSm<D, G>(shape.fp8);
  }
  static const int paged = ResidentBlocksPerSm(
      reinterpret_cast<const void*>(AttentionKernel<D, G, true>), 32 * kWarps, 0);
  static const int contiguous = ResidentBlocksPerSm(
      reinterpret_cast<const void*>(AttentionKernel<D, G, false>), 32 * kWarps, 0);
  return shape.paged ? paged : contiguous;
}

// How many blocks of the kernel that takes `shape` an SM holds at once.
int BlocksPerSm(const AttentionSplitShape& shape) {
  const auto for_group = [&](auto d) -> int {
    constexpr int D = decltype(d)::value;
    switch (shape.q_heads / shape.kv_heads) {
      case 1:
        return BlocksPerSmFor<D, 1>(shape);
      case 2:
        return BlocksPerSmFor<D, 2>(shape);
      case 4:
        return BlocksPerSmFor<D, 4>(shape);
      default:
        return BlocksPerSmFor<D, 8>(shape);
    }
  };
  return shape.head_dim == 64 ? for_group(std::integral_constant<int, 64>{})
                              : for_group(std::integral_constant<int, 128>{});
}

}  // namespace

int64_t PagedAttentionScratchFloats(int64_t rows, int64_t q_heads, int64_t head_dim,
                                    int64_t max_splits) {
  return max_splits <= 1 ? 0 : rows * q_heads * max_splits * (2 + head_dim);
}

int32_t PickAttentionSplits(const AttentionSplitShape& shape, int32_t sm_count) {
  if (shape.rows <= 0 || shape.max_keys <= kMinSplitKeys ||
      !PagedAttentionSupports(shape.q_heads, shape.kv_heads, shape.head_dim)) {
    return 1;
  }
  const int64_t slots = static_cast<int64_t>(BlocksPerSm(shape)) * std::max(sm_count, 1);
  const int64_t base = shape.rows * shape.kv_heads;
  const int64_t group = shape.q_heads / shape.kv_heads;
  // Bytes a block moves per key it takes, and per split: its partial written, then read by the
  // merge. A block's start (its query, the first tiles' round trip) and the merge's launch are
  // counted as the bytes the GPU would read meanwhile (about 0.8 and 4 us on an H200).
  const double key_bytes = 2.0 * shape.head_dim * (shape.fp8 ? 1 : shape.paged ? 2 : 4);
  const double partial_bytes = 2.0 * group * (shape.head_dim + 2) * 4;
  constexpr double kBlockStartBytes = 16e3, kMergeBytes = 16e6;
  int32_t best = 1;
  double best_cost = 0.0;
  for (int32_t splits = 1; splits <= kMaxSplits; ++splits) {
    const int64_t length = RowSplitKeys(shape.max_keys, splits);
    if (splits > 1 && length < kMinSplitKeys) break;
    // Bytes each of the GPU's block places moves: whole waves of blocks of `length` keys.
    const int64_t blocks = base * splits;
    const double waves = static_cast<double>((blocks + slots - 1) / slots);
    double cost = waves * (static_cast<double>(length) * key_bytes + kBlockStartBytes);
    if (splits > 1) cost += (static_cast<double>(blocks) * partial_bytes + kMergeBytes) / slots;
    if (splits == 1 || cost < best_cost) {
      best = splits;
      best_cost = cost;
    }
  }
  return best;
}

bool PagedAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (kv_heads <= 0 || q_heads % kv_heads != 0) return false;
  const int32_t group = q_heads / kv_heads;
  return group == 1 || group == 2 || group == 4 || group == 8;
}

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream) {
  const int32_t rows = args.row_list != nullptr ? args.row_list_size : args.step.rows;
  if (rows == 0) return cudaSuccess;
  if (!PagedAttentionSupports(args.q_heads, args.kv_heads, args.head_dim) || args.max_splits < 1) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t launched = args.head_dim == 64 ? LaunchForHeadDim<64>(args, stream)
                                                   : LaunchForHeadDim<128>(args, stream);
  if (launched != cudaSuccess || args.max_splits == 1) return launched;
  MergeSplitsKernel<<<dim3(rows, args.q_heads), args.head_dim, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
