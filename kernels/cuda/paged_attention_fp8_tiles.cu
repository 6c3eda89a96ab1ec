// The fp8 tile kernel of paged attention decode (kernels/cuda/paged_attention.h): full-attention
// rows over e4m3 KV blocks, both products on the tensor cores (mma.sync m16n8k16, fp16 inputs,
// fp32 sums). The SIMT form of the same kernel read fp8 at 3.0 TB/s, bound by shared-memory
// reads of the query and per-key shuffles of the probabilities (tools/bench/RESULTS.md).
//
// A warp takes a tile of 16 consecutive keys of one block at a time, streamed through a ring of
// kStages shared-memory stages by cp.async as in the bf16 tile kernel (paged_attention_tiles.cu).
// Per tile, with lane = 4 g + c (the fragment layouts of kernels/cuda/bf16_mma.h):
//  - S = K q^T as a 16 (keys) x 8 (query heads of the group, zero beyond G) product over D/16
//    steps. The order of the head dimension inside a sum is free, so lane (g, c) takes bytes
//    [c D/4, (c + 1) D/4) of keys g and g + 8, and holds the query's same dimensions of head g
//    as fp16 B fragments in registers for the whole block. It gets S for keys g, g + 8 and heads
//    2c, 2c + 1.
//  - Online softmax per head over the tile's keys (shuffles across g), the probabilities times
//    each value's scale, rounded to fp16 and moved by four shuffles into the B fragment of
//  - O^T += V^T P^T, a D (dimensions) x 8 (heads) product over the tile's 16 keys. The order of
//    the output dimensions is also free: lane (g, c) owns dimensions [g D/8, (g + 1) D/8), so it
//    reads one contiguous D/8-byte piece of each of keys 2c, 2c + 1, 2c + 8 and 2c + 9, and byte
//    permutes pair the keys into A fragments.
// Keys' and values' 16-byte pieces are swizzled in the stages (at head_dim 128) so that the eight
// lanes of each quarter warp read distinct banks.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_pipeline.h>

#include "kernels/cuda/fp8_kv.h"
#include "kernels/cuda/paged_attention_common.cuh"
#include "kernels/cuda/tf32x3_mma.h"

namespace ridge::cuda::paged_attention_internal {
namespace {

constexpr int kStages = 3;

template <int D>
struct Fp8Tile {
  static constexpr int kRowVecs = D / 16;  // 16-byte pieces of a key or value row
  static constexpr int kTileVecs = kTile * kRowVecs;
  static constexpr int kScaleVecs = 2 * kTile * 4 / 16;  // keys' then values' scales
  static constexpr int kStageVecs = 2 * kTileVecs + kScaleVecs;
  static constexpr int kSteps = D / 16;       // k steps of S, m steps of O^T
  static constexpr int kKeyWords = D / 16;    // 32-bit words of a key a lane reads (D/4 bytes)
  static constexpr int kValueWords = D / 32;  // the same of a value (D/8 bytes)
};

template <int D>
constexpr int Fp8SharedBytes(int g) {
  const int stages = kWarps * kStages * Fp8Tile<D>::kStageVecs * 16;
  const int results = kWarps * g * (D + 2) * 4;
  return stages > results ? stages : results;
}

// Where piece v of key (value) row t lies in its stage: at head_dim 128 quarter warps read pieces
// 2c (+1) of rows g = 0, 1 (keys) and piece g = 0, 1 of rows 0, 2, 4, 6 (values).
template <int D>
__device__ __forceinline__ int KeyPiece(int t, int v) {
  return D == 128 ? v ^ (t & 1) : v;
}
template <int D>
__device__ __forceinline__ int ValuePiece(int t, int v) {
  return D == 128 ? v ^ (((t >> 1) & 3) << 1) : v;
}

// The two e4m3 values in the low 16 bits of `bits` as an fp16 pair (the first in the low half).
__device__ __forceinline__ uint32_t Fp8PairToHalf2(uint32_t bits) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

template <int D>
__device__ __forceinline__ void IssueFp8TileCopies(const PagedAttentionArgs& a, int32_t block,
                                                   int kv_head, int64_t first_in_block,
                                                   uint4* stage, int lane) {
  using Tile = Fp8Tile<D>;
  const Fp8KvPart part = Fp8PartOf(a.paged, block, a.kv_heads, D);
  const int64_t at = static_cast<int64_t>(kv_head) * a.paged.block_size + first_in_block;
  const uint4* keys = reinterpret_cast<const uint4*>(part.keys + at * D);
  const uint4* values = reinterpret_cast<const uint4*>(part.keys + part.values_offset + at * D);
  if (lane < Tile::kScaleVecs) {
    const float* scales = part.key_scales +
                          (lane >= Tile::kScaleVecs / 2 ? part.scales_offset : 0) + at +
                          (lane % (Tile::kScaleVecs / 2)) * 4;
    __pipeline_memcpy_async(stage + 2 * Tile::kTileVecs + lane, scales, 16);
  }
#pragma unroll
  for (int j = lane; j < Tile::kTileVecs; j += 32) {
    const int t = j / Tile::kRowVecs, v = j % Tile::kRowVecs;
    __pipeline_memcpy_async(stage + t * Tile::kRowVecs + KeyPiece<D>(t, v), keys + j, 16);
    __pipeline_memcpy_async(stage + Tile::kTileVecs + t * Tile::kRowVecs + ValuePiece<D>(t, v),
                            values + j, 16);
  }
}

// Lane (g, c)'s words of key row t: bytes [c D/4, (c + 1) D/4), in order.
template <int D>
__device__ __forceinline__ void KeyWords(const uint4* rows, int t, int c, uint32_t* words) {
  constexpr int kPieces = D / 64;  // 16-byte pieces a lane takes of a key
#pragma unroll
  for (int p = 0; p < kPieces; ++p) {
    const uint4 piece = rows[t * Fp8Tile<D>::kRowVecs + KeyPiece<D>(t, c * kPieces + p)];
    words[4 * p] = piece.x;
    words[4 * p + 1] = piece.y;
    words[4 * p + 2] = piece.z;
    words[4 * p + 3] = piece.w;
  }
}

// Lane (g, c)'s words of value row t: bytes [g D/8, (g + 1) D/8), in order.
template <int D>
__device__ __forceinline__ void ValueWords(const uint4* rows, int t, int g, uint32_t* words) {
  if constexpr (D == 128) {
    const uint4 piece = rows[t * Fp8Tile<D>::kRowVecs + ValuePiece<D>(t, g)];
    words[0] = piece.x;
    words[1] = piece.y;
    words[2] = piece.z;
    words[3] = piece.w;
  } else {
    const uint2 piece = reinterpret_cast<const uint2*>(rows + t * Fp8Tile<D>::kRowVecs)[g];
    words[0] = piece.x;
    words[1] = piece.y;
  }
}

template <int D, int G>
__global__ void __launch_bounds__(32 * kWarps, 2) Fp8TileAttentionKernel(PagedAttentionArgs a) {
  using Tile = Fp8Tile<D>;
  constexpr int kSteps = Tile::kSteps;
  extern __shared__ uint4 shared[];

  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int r = a.row_list != nullptr ? a.row_list[blockIdx.z] : blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int seq = a.step.row_sequence[r];
  const RowKeys keys = KeysOf(a, r, seq);
  const RowKeys span = SplitKeysOf(a, keys, split);
  const int64_t first = span.first, end = span.end;
  const int32_t bs = a.paged.block_size;
  const int32_t* table = a.step.block_tables + a.step.table_begin[seq];
  uint4* ring = shared + warp * kStages * Tile::kStageVecs;
  const int64_t stride = kWarps * kTile;
  const int64_t warp_first = first + warp * kTile;
  auto issue = [&](int64_t tile, int stage) {
    if (tile < end) {
      IssueFp8TileCopies<D>(a, table[tile / bs], kv_head, tile % bs,
                            ring + stage * Tile::kStageVecs, lane);
    }
    __pipeline_commit();  // an empty group where there is no tile keeps the count uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(warp_first + s * stride, s);

  // The query of head g, scaled, as B fragments: step i holds dimensions c D/4 + 4i + (0, 1) and
  // c D/4 + 4i + (2, 3).
  uint32_t query[kSteps][2];
  {
    const float* q =
        a.proj + static_cast<int64_t>(r) * a.proj_stride + (kv_head * G + g) * D + c * (D / 4);
    const float scale = a.scale * kLog2e;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (g < G) x = reinterpret_cast<const float4*>(q)[i];
      query[i][0] = PackHalf2(x.x * scale, x.y * scale);
      query[i][1] = PackHalf2(x.z * scale, x.w * scale);
    }
  }

  // Heads 2c and 2c + 1: the running max (the same in every lane of a c), this lane's part of
  // the sum, and O for dimensions g D/8 + 2i (+1).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[kSteps][4];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  int stage = 0;
  for (int64_t tile = warp_first; tile < end; tile += stride) {
    issue(tile + (kStages - 1) * stride, (stage + kStages - 1) % kStages);
    __pipeline_wait_prior(kStages - 1);
    __syncwarp();
    const uint4* key_rows = ring + stage * Tile::kStageVecs;
    const uint4* value_rows = key_rows + Tile::kTileVecs;
    const float* scales = reinterpret_cast<const float*>(key_rows + 2 * Tile::kTileVecs);

    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    {
      uint32_t low[Tile::kKeyWords], high[Tile::kKeyWords];
      KeyWords<D>(key_rows, g, c, low);
      KeyWords<D>(key_rows, g + 8, c, high);
#pragma unroll
      for (int i = 0; i < kSteps; ++i) {
        MmaF16(s,
               {Fp8PairToHalf2(low[i]), Fp8PairToHalf2(high[i]), Fp8PairToHalf2(low[i] >> 16),
                Fp8PairToHalf2(high[i] >> 16)},
               query[i]);
      }
    }
    const bool valid_low = tile + g < end, valid_high = tile + g + 8 < end;
    const float scale_low = scales[g], scale_high = scales[g + 8];
    s[0] = valid_low ? s[0] * scale_low : -INFINITY;
    s[1] = valid_low ? s[1] * scale_low : -INFINITY;
    s[2] = valid_high ? s[2] * scale_high : -INFINITY;
    s[3] = valid_high ? s[3] * scale_high : -INFINITY;
    float p[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = fmaxf(s[h], s[2 + h]);
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float new_max = fmaxf(m[h], tile_max);
      const float correction = exp2f(m[h] - new_max);
      p[h] = exp2f(s[h] - new_max);
      p[2 + h] = exp2f(s[2 + h] - new_max);
      l[h] = l[h] * correction + p[h] + p[2 + h];
      m[h] = new_max;
#pragma unroll
      for (int i = 0; i < kSteps; ++i) {
        acc[i][h] *= correction;
        acc[i][2 + h] *= correction;
      }
    }
    // P^T's B fragment: lane (g, c) needs head g of keys 2c, 2c + 1 (b0) and 2c + 8, 2c + 9
    // (b1); lane (k, g / 2) holds keys k and k + 8 of heads g & ~1 and g | 1.
    const float value_low = scales[kTile + g], value_high = scales[kTile + g + 8];
    const uint32_t mine_low = PackHalf2(p[0] * value_low, p[1] * value_low);
    const uint32_t mine_high = PackHalf2(p[2] * value_high, p[3] * value_high);
    const int even_source = 8 * c + (g >> 1), odd_source = even_source + 4;
    const uint32_t even_low = __shfl_sync(0xffffffffu, mine_low, even_source);
    const uint32_t odd_low = __shfl_sync(0xffffffffu, mine_low, odd_source);
    const uint32_t even_high = __shfl_sync(0xffffffffu, mine_high, even_source);
    const uint32_t odd_high = __shfl_sync(0xffffffffu, mine_high, odd_source);
    const uint32_t select = (g & 1) ? 0x7632u : 0x5410u;
    const uint32_t probabilities[2] = {__byte_perm(even_low, odd_low, select),
                                       __byte_perm(even_high, odd_high, select)};

    uint32_t v0[Tile::kValueWords], v1[Tile::kValueWords], v8[Tile::kValueWords],
        v9[Tile::kValueWords];
    ValueWords<D>(value_rows, 2 * c, g, v0);
    ValueWords<D>(value_rows, 2 * c + 1, g, v1);
    ValueWords<D>(value_rows, 2 * c + 8, g, v8);
    ValueWords<D>(value_rows, 2 * c + 9, g, v9);
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      // Bytes 2i and 2i + 1 of the lane's piece: dimension g D/8 + 2i of keys (2c, 2c + 1) in the
      // low half, dimension + 1 in the high half.
      const uint32_t pick = (i & 1) ? 0x7362u : 0x5140u;
      const uint32_t early = __byte_perm(v0[i / 2], v1[i / 2], pick);
      const uint32_t late = __byte_perm(v8[i / 2], v9[i / 2], pick);
      MmaF16(acc[i],
             {Fp8PairToHalf2(early), Fp8PairToHalf2(early >> 16), Fp8PairToHalf2(late),
              Fp8PairToHalf2(late >> 16)},
             probabilities);
    }
    __syncwarp();  // the stage is refilled two tiles on
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int offset = 4; offset < 32; offset <<= 1) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], offset);
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // every warp is done with the stages: they take the partial results
  float(*warp_acc)[G][D] = reinterpret_cast<float(*)[G][D]>(shared);
  float(*warp_max)[G] = reinterpret_cast<float(*)[G]>(&warp_acc[kWarps][0][0]);
  float(*warp_sum)[G] = warp_max + kWarps;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = 2 * c + h;
    if (head < G) {
#pragma unroll
      for (int i = 0; i < kSteps; ++i) {
        const int d = g * (D / 8) + 2 * i;
        warp_acc[warp][head][d] = acc[i][h];
        warp_acc[warp][head][d + 1] = acc[i][2 + h];
      }
      if (g == 0) {
        warp_max[warp][head] = m[h];
        warp_sum[warp][head] = l[h];
      }
    }
  }
  __syncthreads();
  WriteBlockResult<D, G, kWarps>(a, warp_max, warp_sum, warp_acc, r, kv_head, split);
}

// Lets the kernel have its shared memory (once).
template <int D, int G>
cudaError_t ConfigureFp8Tiles() {
  static const cudaError_t configured =
      cudaFuncSetAttribute(Fp8TileAttentionKernel<D, G>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, Fp8SharedBytes<D>(G));
  return configured;
}

}  // namespace

template <int D, int G>
cudaError_t LaunchFp8TileAttention(const PagedAttentionArgs& a, dim3 grid, cudaStream_t stream) {
  if (const cudaError_t e = ConfigureFp8Tiles<D, G>(); e != cudaSuccess) return e;
  Fp8TileAttentionKernel<D, G><<<grid, 32 * kWarps, Fp8SharedBytes<D>(G), stream>>>(a);
  return cudaGetLastError();
}

template <int D, int G>
int Fp8TileAttentionBlocksPerSm() {
  static const int blocks =
      ConfigureFp8Tiles<D, G>() == cudaSuccess
          ? ResidentBlocksPerSm(reinterpret_cast<const void*>(Fp8TileAttentionKernel<D, G>),
                                32 * kWarps, Fp8SharedBytes<D>(G))
          : 1;
  return blocks;
}

template cudaError_t LaunchFp8TileAttention<64, 1>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<64, 2>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<64, 4>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<64, 8>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<128, 1>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<128, 2>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<128, 4>(const PagedAttentionArgs&, dim3, cudaStream_t);
template cudaError_t LaunchFp8TileAttention<128, 8>(const PagedAttentionArgs&, dim3, cudaStream_t);

template int Fp8TileAttentionBlocksPerSm<64, 1>();
template int Fp8TileAttentionBlocksPerSm<64, 2>();
template int Fp8TileAttentionBlocksPerSm<64, 4>();
template int Fp8TileAttentionBlocksPerSm<64, 8>();
template int Fp8TileAttentionBlocksPerSm<128, 1>();
template int Fp8TileAttentionBlocksPerSm<128, 2>();
template int Fp8TileAttentionBlocksPerSm<128, 4>();
template int Fp8TileAttentionBlocksPerSm<128, 8>();

}  // namespace ridge::cuda::paged_attention_internal
