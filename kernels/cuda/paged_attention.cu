#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/fp8_kv.h"
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

// Full attention over KV blocks whose size is a multiple of kTile: a warp takes a tile of 16
// consecutive keys of one block at a time (4 KB of keys and 4 KB of values at head_dim 128 in
// bf16, half that in fp8, each contiguous). Lane pair (2t, 2t + 1) scores key t (interleaved
// halves of its 16-byte pieces, the query from shared memory); for the values, lane l owns
// dimensions [l * D/32, (l + 1) * D/32) of every key of the tile. Each warp streams its tiles
// through a ring of kStages shared-memory stages by cp.async, kStages - 1 tiles ahead of the one
// it scores, so its loads stay in flight while it computes and no registers hold them (the same
// work with register loads read 2.95 TB/s against this kernel's 4.23, tools/bench/RESULTS.md).
// Keys are stored with their 16-byte pieces swizzled (SwizzledPiece) so that the lane pairs
// reading four keys' interleaved pieces at once hit distinct banks; values are read a row per
// warp, conflict-free. In fp8 the tile's scales come along: a key's scale multiplies its score,
// a value's its row. After the loop the stages hold the warps' partial results.
constexpr int kTile = 16;
constexpr int kStages = 3;

template <int D, bool kFp8>
struct TileShape {
  static constexpr int kRowVecs = D * (kFp8 ? 1 : 2) / 16;  // 16-byte pieces of a key
  static constexpr int kTileVecs = kTile * kRowVecs;
  static constexpr int kScaleVecs = kFp8 ? 2 * kTile * 4 / 16 : 0;  // keys' then values' scales
  static constexpr int kStageVecs = 2 * kTileVecs + kScaleVecs;
};

template <int D, int G, bool kFp8>
constexpr int TileSharedBytes() {
  constexpr int stages = kWarps * kStages * TileShape<D, kFp8>::kStageVecs * 16;
  constexpr int results = kWarps * G * (D + 2) * 4;
  return stages > results ? stages : results;
}

// Where piece v of key t of a tile lies in its stage row: the four keys a quarter warp reads at
// once land on distinct banks (rows of 256 or 128 bytes: v ^ 2 (t % 4); rows of 64: two rows a
// bank line, v ^ 2 ((t / 2) % 2)).
template <int kRowVecs>
__device__ __forceinline__ int SwizzledPiece(int t, int v) {
  if constexpr (kRowVecs >= 8) {
    return v ^ ((t & 3) << 1);
  } else {
    return v ^ (((t >> 1) & 1) << 1);
  }
}

template <int D, bool kFp8>
__device__ __forceinline__ void IssueTileCopies(const PagedAttentionArgs& a, int32_t block,
                                                int kv_head, int64_t first_in_block, uint4* stage,
                                                int lane) {
  using Shape = TileShape<D, kFp8>;
  const uint4* keys;
  const uint4* values;
  if constexpr (kFp8) {
    const Fp8KvPart part = Fp8PartOf(a.paged, block, a.kv_heads, D);
    const int64_t at = static_cast<int64_t>(kv_head) * a.paged.block_size + first_in_block;
    keys = reinterpret_cast<const uint4*>(part.keys + at * D);
    values = reinterpret_cast<const uint4*>(part.keys + part.values_offset + at * D);
    if (lane < Shape::kScaleVecs) {
      const float* scales = part.key_scales +
                            (lane >= Shape::kScaleVecs / 2 ? part.scales_offset : 0) + at +
                            (lane % (Shape::kScaleVecs / 2)) * 4;
      __pipeline_memcpy_async(stage + 2 * Shape::kTileVecs + lane, scales, 16);
    }
  } else {
    const __nv_bfloat16* base =
        static_cast<const __nv_bfloat16*>(a.paged.cache) + block * a.paged.block_elements +
        a.paged.layer_offset +
        (static_cast<int64_t>(kv_head) * a.paged.block_size + first_in_block) * D;
    keys = reinterpret_cast<const uint4*>(base);
    values = reinterpret_cast<const uint4*>(base + static_cast<int64_t>(a.kv_heads) *
                                                       a.paged.block_size * D);
  }
#pragma unroll
  for (int j = lane; j < Shape::kTileVecs; j += 32) {
    const int t = j / Shape::kRowVecs, v = j % Shape::kRowVecs;
    __pipeline_memcpy_async(stage + t * Shape::kRowVecs + SwizzledPiece<Shape::kRowVecs>(t, v),
                            keys + j, 16);
    __pipeline_memcpy_async(stage + Shape::kTileVecs + j, values + j, 16);
  }
}

// The kValueDims values lane `lane` owns of key t of a staged tile, as floats.
template <int D, bool kFp8>
__device__ __forceinline__ void StagedValues(const uint4* stage_values, int t, int lane,
                                             float* value) {
  constexpr int kValueDims = D / 32;
  if constexpr (kFp8) {
    const uint8_t* row = reinterpret_cast<const uint8_t*>(stage_values) + t * D + lane * kValueDims;
#pragma unroll
    for (int j = 0; j < kValueDims; j += 2) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          *reinterpret_cast<const __nv_fp8x2_storage_t*>(row + j), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      value[j] = f.x;
      value[j + 1] = f.y;
    }
  } else {
    const __nv_bfloat16* row =
        reinterpret_cast<const __nv_bfloat16*>(stage_values) + t * D + lane * kValueDims;
#pragma unroll
    for (int j = 0; j < kValueDims; j += 2) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + j));
      value[j] = f.x;
      value[j + 1] = f.y;
    }
  }
}

template <int D, int G, bool kFp8>
__global__ void __launch_bounds__(32 * kWarps, 2) TileAttentionKernel(PagedAttentionArgs a) {
  using Shape = TileShape<D, kFp8>;
  constexpr int kRowVecs = Shape::kRowVecs;
  constexpr int kKeyVecs = kRowVecs / 2;  // pieces a lane scores: every other one of its key
  constexpr int kPieceDims = kFp8 ? 16 : 8;
  constexpr int kValueDims = D / 32;  // 4 or 2
  extern __shared__ uint4 shared[];
  // The query, scaled: fp32, or for fp8 keys fp16 (read as half2, a piece's products summed in
  // fp16 eight at a time: half the shared-memory reads, which bound the fp8 kernel).
  __shared__ __align__(16) float query[G][D];
  __half(*query_h)[D] = reinterpret_cast<__half(*)[D]>(&query[0][0]);

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int r = a.row_list != nullptr ? a.row_list[blockIdx.z] : blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int key_in_tile = lane >> 1, half = lane & 1;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const int64_t first = keys.first + static_cast<int64_t>(split) * a.split_keys;
  const int64_t end = min(first + a.split_keys, keys.end);
  const int32_t bs = a.paged.block_size;
  const int32_t* table = a.step.block_tables + a.step.table_begin[seq];
  uint4* ring = shared + warp * kStages * Shape::kStageVecs;
  const int64_t stride = kWarps * kTile;
  const int64_t warp_first = first + warp * kTile;
  auto issue = [&](int64_t tile, int stage) {
    if (tile < end) {
      IssueTileCopies<D, kFp8>(a, table[tile / bs], kv_head, tile % bs,
                               ring + stage * Shape::kStageVecs, lane);
    }
    __pipeline_commit();  // an empty group where there is no tile keeps the count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(warp_first + s * stride, s);

  const float* q_row = a.proj + static_cast<int64_t>(r) * a.proj_stride + kv_head * G * D;
  for (int i = threadIdx.x; i < G * D; i += 32 * kWarps) {
    const float q = q_row[i] * a.scale * kLog2e;
    if constexpr (kFp8) {
      query_h[i / D][i % D] = __float2half(q);
    } else {
      query[i / D][i % D] = q;
    }
  }
  __syncthreads();

  float m[G], l[G], acc[G][kValueDims];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < kValueDims; ++j) acc[h][j] = 0.0f;
  }
  int stage = 0;
  for (int64_t tile = warp_first; tile < end; tile += stride) {
    issue(tile + (kStages - 1) * stride, (stage + kStages - 1) % kStages);
    __pipeline_wait_prior(kStages - 1);
    __syncwarp();
    const uint4* key_rows = ring + stage * Shape::kStageVecs;
    const uint4* value_rows = key_rows + Shape::kTileVecs;
    const float* scales = reinterpret_cast<const float*>(key_rows + 2 * Shape::kTileVecs);
    const bool valid = tile + key_in_tile < end;
    float p[G];
#pragma unroll
    for (int h = 0; h < G; ++h) p[h] = 0.0f;
    const uint4* my_key = key_rows + key_in_tile * kRowVecs;
#pragma unroll
    for (int i = 0; i < kKeyVecs; ++i) {
      const int v = 2 * i + half;
      const uint4 piece = my_key[SwizzledPiece<kRowVecs>(key_in_tile, v)];
      if constexpr (kFp8) {
        const uint32_t words[4] = {piece.x, piece.y, piece.z, piece.w};
        __half2 k2[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
              static_cast<__nv_fp8x2_storage_t>(words[j / 2] >> (16 * (j % 2))), __NV_E4M3);
          k2[j] = *reinterpret_cast<const __half2*>(&raw);
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
          const uint4* q4 = reinterpret_cast<const uint4*>(&query_h[h][v * kPieceDims]);
          const uint4 qa = q4[0], qb = q4[1];
          const __half2* q2a = reinterpret_cast<const __half2*>(&qa);
          const __half2* q2b = reinterpret_cast<const __half2*>(&qb);
          __half2 sum = __hmul2(q2a[0], k2[0]);
#pragma unroll
          for (int j = 1; j < 4; ++j) sum = __hfma2(q2a[j], k2[j], sum);
#pragma unroll
          for (int j = 0; j < 4; ++j) sum = __hfma2(q2b[j], k2[4 + j], sum);
          const float2 f = __half22float2(sum);
          p[h] += f.x + f.y;
        }
      } else {
        float k[kPieceDims];
        LoadBf16x8(reinterpret_cast<const __nv_bfloat16*>(&piece), k);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          const float* qh = &query[h][v * kPieceDims];
#pragma unroll
          for (int e = 0; e < kPieceDims; ++e) p[h] += qh[e] * k[e];
        }
      }
    }
    const float key_scale = kFp8 ? scales[key_in_tile] : 1.0f;
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float dot = (p[h] + __shfl_xor_sync(0xffffffffu, p[h], 1)) * key_scale;
      const float score = valid ? dot : -INFINITY;
      float tile_max = score;
#pragma unroll
      for (int offset = 16; offset > 1; offset >>= 1) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float new_max = fmaxf(m[h], tile_max);
      const float correction = exp2f(m[h] - new_max);
      p[h] = exp2f(score - new_max);
      float tile_sum = p[h];
#pragma unroll
      for (int offset = 16; offset > 1; offset >>= 1) {
        tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, offset);
      }
      l[h] = l[h] * correction + tile_sum;
      m[h] = new_max;
#pragma unroll
      for (int j = 0; j < kValueDims; ++j) acc[h][j] *= correction;
    }
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      float value[kValueDims];
      StagedValues<D, kFp8>(value_rows, t, lane, value);
      if constexpr (kFp8) {
        const float value_scale = scales[kTile + t];
#pragma unroll
        for (int j = 0; j < kValueDims; ++j) value[j] *= value_scale;
      }
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float pt = __shfl_sync(0xffffffffu, p[h], 2 * t);
#pragma unroll
        for (int j = 0; j < kValueDims; ++j) acc[h][j] += pt * value[j];
      }
    }
    __syncwarp();  // the stage is refilled two tiles on
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // every warp is done with the stages: they take the partial results
  float(*warp_acc)[G][D] = reinterpret_cast<float(*)[G][D]>(shared);
  float(*warp_max)[G] = reinterpret_cast<float(*)[G]>(&warp_acc[kWarps][0][0]);
  float(*warp_sum)[G] = warp_max + kWarps;
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int j = 0; j < kValueDims; ++j) warp_acc[warp][h][lane * kValueDims + j] = acc[h][j];
    if (lane == 0) {
      warp_max[warp][h] = m[h];
      warp_sum[warp][h] = l[h];
    }
  }
  __syncthreads();
  WriteBlockResult<D, G, kWarps>(a, warp_max, warp_sum, warp_acc, r, kv_head, split);
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
  const dim3 grid(a.max_splits, a.kv_heads, a.row_list != nullptr ? a.row_list_size : a.step.rows);
  const bool tiles = a.paged.block_size % kTile == 0 && a.split_keys % kTile == 0;
  if (a.paged.cache != nullptr && a.paged.fp8) {
    if (!tiles) return cudaErrorInvalidValue;  // fp8 blocks are read by the tile kernel only
    constexpr int kShared = TileSharedBytes<D, G, true>();
    static const cudaError_t configured = cudaFuncSetAttribute(
        TileAttentionKernel<D, G, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
    if (configured != cudaSuccess) return configured;
    TileAttentionKernel<D, G, true><<<grid, 32 * kWarps, kShared, stream>>>(a);
  } else if (a.paged.cache != nullptr && tiles) {
    constexpr int kShared = TileSharedBytes<D, G, false>();
    static const cudaError_t configured = cudaFuncSetAttribute(
        TileAttentionKernel<D, G, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
    if (configured != cudaSuccess) return configured;
    TileAttentionKernel<D, G, false><<<grid, 32 * kWarps, kShared, stream>>>(a);
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

}  // namespace

int64_t PagedAttentionScratchFloats(int64_t rows, int64_t q_heads, int64_t head_dim,
                                    int64_t max_splits) {
  return max_splits <= 1 ? 0 : rows * q_heads * max_splits * (2 + head_dim);
}

int32_t PickAttentionSplits(int64_t rows, int64_t kv_heads, int64_t max_keys, int32_t sm_count,
                            int32_t* split_keys, int32_t blocks_per_sm) {
  const int64_t target_blocks = static_cast<int64_t>(blocks_per_sm) * sm_count;
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
  const int32_t rows = args.row_list != nullptr ? args.row_list_size : args.step.rows;
  if (rows == 0) return cudaSuccess;
  if (!PagedAttentionSupports(args.q_heads, args.kv_heads, args.head_dim) || args.split_keys <= 0 ||
      args.max_splits < 1) {
    return cudaErrorInvalidValue;
  }
  const cudaError_t launched = args.head_dim == 64 ? LaunchForHeadDim<64>(args, stream)
                                                   : LaunchForHeadDim<128>(args, stream);
  if (launched != cudaSuccess || args.max_splits == 1) return launched;
  MergeSplitsKernel<<<dim3(rows, args.q_heads), args.head_dim, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
