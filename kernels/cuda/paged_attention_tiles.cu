// The tile kernel of paged attention decode (kernels/cuda/paged_attention.h): full-attention
// rows over bf16 KV blocks, the loads streamed through shared memory by cp.async (fp8 blocks go
// to the tensor-core form of it, paged_attention_fp8_tiles.cu).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include "kernels/cuda/paged_attention_common.cuh"

namespace ridge::cuda::paged_attention_internal {
namespace {

// Full attention over KV blocks whose size is a multiple of kTile: a warp takes a tile of 16
// consecutive keys of one block at a time (4 KB of keys and 4 KB of values at head_dim 128, each
// contiguous). Lane pair (2t, 2t + 1) scores key t (interleaved
// halves of its 16-byte pieces, the query from shared memory); for the values, lane l owns
// dimensions [l * D/32, (l + 1) * D/32) of every key of the tile. Each warp streams its tiles
// through a ring of kStages shared-memory stages by cp.async, kStages - 1 tiles ahead of the one
// it scores, so its loads stay in flight while it computes and no registers hold them (the same
// work with register loads read 2.95 TB/s against this kernel's 4.23, tools/bench/RESULTS.md).
// Keys are stored with their 16-byte pieces swizzled (SwizzledPiece) so that the lane pairs
// reading four keys' interleaved pieces at once hit distinct banks; values are read a row per
// warp, conflict-free. After the loop the stages hold the warps' partial results.
constexpr int kStages = 3;

template <int D>
struct TileShape {
  static constexpr int kRowVecs = D * 2 / 16;  // 16-byte pieces of a key
  static constexpr int kTileVecs = kTile * kRowVecs;
  static constexpr int kStageVecs = 2 * kTileVecs;
};

template <int D, int G>
constexpr int TileSharedBytes() {
  constexpr int stages = kWarps * kStages * TileShape<D>::kStageVecs * 16;
  constexpr int results = kWarps * G * (D + 2) * 4;
  return stages > results ? stages : results;
}

// Where piece v of key t of a tile lies in its stage row (rows of 256 or 128 bytes): the four
// keys a quarter warp reads at once land on distinct banks.
template <int kRowVecs>
__device__ __forceinline__ int SwizzledPiece(int t, int v) {
  static_assert(kRowVecs >= 8);
  return v ^ ((t & 3) << 1);
}

template <int D>
__device__ __forceinline__ void IssueTileCopies(const PagedAttentionArgs& a, int32_t block,
                                                int kv_head, int64_t first_in_block, uint4* stage,
                                                int lane) {
  using Shape = TileShape<D>;
  const __nv_bfloat16* base =
      static_cast<const __nv_bfloat16*>(a.paged.cache) + block * a.paged.block_elements +
      a.paged.layer_offset +
      (static_cast<int64_t>(kv_head) * a.paged.block_size + first_in_block) * D;
  const uint4* keys = reinterpret_cast<const uint4*>(base);
  const uint4* values = reinterpret_cast<const uint4*>(base + static_cast<int64_t>(a.kv_heads) *
                                                                  a.paged.block_size * D);
#pragma unroll
  for (int j = lane; j < Shape::kTileVecs; j += 32) {
    const int t = j / Shape::kRowVecs, v = j % Shape::kRowVecs;
    __pipeline_memcpy_async(stage + t * Shape::kRowVecs + SwizzledPiece<Shape::kRowVecs>(t, v),
                            keys + j, 16);
    __pipeline_memcpy_async(stage + Shape::kTileVecs + j, values + j, 16);
  }
}

// The kValueDims values lane `lane` owns of key t of a staged tile, as floats.
template <int D>
__device__ __forceinline__ void StagedValues(const uint4* stage_values, int t, int lane,
                                             float* value) {
  constexpr int kValueDims = D / 32;
  const __nv_bfloat16* row =
      reinterpret_cast<const __nv_bfloat16*>(stage_values) + t * D + lane * kValueDims;
#pragma unroll
  for (int j = 0; j < kValueDims; j += 2) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + j));
    value[j] = f.x;
    value[j + 1] = f.y;
  }
}

template <int D, int G>
__global__ void __launch_bounds__(32 * kWarps, 2) TileAttentionKernel(PagedAttentionArgs a) {
  using Shape = TileShape<D>;
  constexpr int kRowVecs = Shape::kRowVecs;
  constexpr int kKeyVecs = kRowVecs / 2;  // pieces a lane scores: every other one of its key
  constexpr int kPieceDims = 8;           // bf16 elements of a 16-byte piece
  constexpr int kValueDims = D / 32;      // 4 or 2
  extern __shared__ uint4 shared[];
  __shared__ __align__(16) float query[G][D];  // scaled

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int r = a.row_list != nullptr ? a.row_list[blockIdx.z] : blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int key_in_tile = lane >> 1, half = lane & 1;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const RowKeys span = SplitKeysOf(a, keys, split);
  const int64_t first = span.first, end = span.end;
  const int32_t bs = a.paged.block_size;
  const int32_t* table = a.step.block_tables + a.step.table_begin[seq];
  uint4* ring = shared + warp * kStages * Shape::kStageVecs;
  const int64_t stride = kWarps * kTile;
  const int64_t warp_first = first + warp * kTile;
  auto issue = [&](int64_t tile, int stage) {
    if (tile < end) {
      IssueTileCopies<D>(a, table[tile / bs], kv_head, tile % bs, ring + stage * Shape::kStageVecs,
                         lane);
    }
    __pipeline_commit();  // an empty group where there is no tile keeps the count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(warp_first + s * stride, s);

  const float* q_row = a.proj + static_cast<int64_t>(r) * a.proj_stride + kv_head * G * D;
  for (int i = threadIdx.x; i < G * D; i += 32 * kWarps) {
    query[i / D][i % D] = q_row[i] * a.scale * kLog2e;
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
    const bool valid = tile + key_in_tile < end;
    float p[G];
#pragma unroll
    for (int h = 0; h < G; ++h) p[h] = 0.0f;
    const uint4* my_key = key_rows + key_in_tile * kRowVecs;
#pragma unroll
    for (int i = 0; i < kKeyVecs; ++i) {
      const int v = 2 * i + half;
      const uint4 piece = my_key[SwizzledPiece<kRowVecs>(key_in_tile, v)];
      float k[kPieceDims];
      LoadBf16x8(reinterpret_cast<const __nv_bfloat16*>(&piece), k);
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float* qh = &query[h][v * kPieceDims];
#pragma unroll
        for (int e = 0; e < kPieceDims; ++e) p[h] += qh[e] * k[e];
      }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float dot = p[h] + __shfl_xor_sync(0xffffffffu, p[h], 1);
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
      StagedValues<D>(value_rows, t, lane, value);
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

// Lets the kernel have its shared memory (once).
template <int D, int G>
cudaError_t ConfigureTiles() {
  static const cudaError_t configured =
      cudaFuncSetAttribute(TileAttentionKernel<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           TileSharedBytes<D, G>());
  return configured;
}

template <int D, int G>
cudaError_t LaunchTiles(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream) {
  if (const cudaError_t e = ConfigureTiles<D, G>(); e != cudaSuccess) return e;
  TileAttentionKernel<D, G><<<grid, 32 * kWarps, TileSharedBytes<D, G>(), stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

template <int D, int G>
cudaError_t LaunchTileAttention(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream) {
  return a.paged.fp8 ? LaunchFp8TileAttention<D, G>(a, grid, stream)
                     : LaunchTiles<D, G>(a, grid, stream);
}

template <int D, int G>
int TileAttentionBlocksPerSm(bool fp8) {
  if (fp8) return Fp8TileAttentionBlocksPerSm<D, G>();
  static const int blocks =
      ConfigureTiles<D, G>() == cudaSuccess
          ? ResidentBlocksPerSm(reinterpret_cast<const void*>(TileAttentionKernel<D, G>),
                                32 * kWarps, TileSharedBytes<D, G>())
          : 1;
  return blocks;
}

template cudaError_t LaunchTileAttention<64, 1>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<64, 2>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<64, 4>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<64, 8>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<128, 1>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<128, 2>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<128, 4>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchTileAttention<128, 8>(const PagedAttentionArgs&, dim3, cudaStream_t);

template int TileAttentionBlocksPerSm<64, 1>(bool);
template int TileAttentionBlocksPerSm<64, 2>(bool);
template int TileAttentionBlocksPerSm<64, 4>(bool);
template int TileAttentionBlocksPerSm<64, 8>(bool);
template int TileAttentionBlocksPerSm<128, 1>(bool);
template int TileAttentionBlocksPerSm<128, 2>(bool);
template int TileAttentionBlocksPerSm<128, 4>(bool);
template int TileAttentionBlocksPerSm<128, 8>(bool);

}  // namespace ridge::cuda::paged_attention_internal
