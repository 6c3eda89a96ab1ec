// Prompt rows of full-attention layers on the tensor cores (kernels/cuda/paged_attention.h,
// LaunchPagedPrefillAttention). Per block: up to 16 rows of one sequence and one kv head; warp w
// computes query head kv_head * G + w for those rows as one m16 tile: S = Q K^T and O += P V
// with mma.sync m16n8k16 (bf16 operands, fp32 accumulators), the online softmax on the S
// accumulators in registers (FlashAttention-2), keys and values staged 64 at a time in shared
// memory by cp.async and shared by the group's warps.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <cmath>

#include "kernels/cuda/bf16_mma.h"
#include "kernels/cuda/fp8_kv.h"
#include "kernels/cuda/paged_attention.h"

namespace ridge::cuda {
namespace {

constexpr int kRows = 16;  // query rows a block takes (an mma's M)
constexpr int kKeys = 64;  // keys a pass stages
constexpr float kLog2e = 1.4426950408889634f;

template <int D, int G>
__global__ void __launch_bounds__(32 * G)
    PrefillAttentionKernel(PagedAttentionArgs a, const int32_t* tile_first_row) {
  constexpr int kStride = D + 8;  // bf16 per staged row: fragment reads hit 8 distinct banks
  constexpr int kPieces = D / 8;  // 16-byte pieces of a row
  __shared__ __align__(16) __nv_bfloat16 keys[kKeys][kStride];
  __shared__ __align__(16) __nv_bfloat16 values[kKeys][kStride];

  const int kv_head = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int first_row = tile_first_row[blockIdx.x];
  const int seq = a.step.row_sequence[first_row];
  const int seq_begin = a.step.row_begin[seq];
  const int rows = min(kRows, seq_begin + a.step.row_count[seq] - first_row);
  const int64_t first_position = a.step.start_position[seq] + (first_row - seq_begin);
  const int64_t end_key = first_position + rows;  // keys [0, end_key)
  const int q_head = kv_head * G + warp;

  // Q as A fragments (scaled, log2 domain): rows g and g + 8 of the tile.
  uint32_t qa[D / 16][4];
  const float scale = a.scale * kLog2e;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1), col = ks * 16 + 2 * t + 8 * (i >> 1);
      float x0 = 0.0f, x1 = 0.0f;
      if (row < rows) {
        const float* q =
            a.proj + static_cast<int64_t>(first_row + row) * a.proj_stride + q_head * D + col;
        x0 = q[0] * scale;
        x1 = q[1] * scale;
      }
      qa[ks][i] = PackBf16(x0, x1);
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int32_t bs = a.paged.block_size;
  const int32_t* table = a.step.block_tables + a.step.table_begin[seq];
  const __nv_bfloat16* cache = static_cast<const __nv_bfloat16*>(a.paged.cache);
  const int64_t head_offset = a.paged.layer_offset + static_cast<int64_t>(kv_head) * bs * D;
  const int64_t values_offset = static_cast<int64_t>(a.kv_heads) * bs * D;
  for (int64_t key0 = 0; key0 < end_key; key0 += kKeys) {
    for (int i = threadIdx.x; i < kKeys * kPieces; i += 32 * G) {
      const int key = i / kPieces, piece = i % kPieces;
      const int64_t position = key0 + key;
      __nv_bfloat16* k_dst = &keys[key][piece * 8];
      __nv_bfloat16* v_dst = &values[key][piece * 8];
      if (position < end_key && a.paged.fp8) {
        // fp8 blocks: widened to bf16 on the way in (plain loads; the staging is the same).
        const Fp8KvPart part = Fp8PartOf(a.paged, table[position / bs], a.kv_heads, D);
        const int64_t at = static_cast<int64_t>(kv_head) * bs + position % bs;
        const uint8_t* src = part.keys + at * D + piece * 8;
        float k[8], v[8];
        Fp8x8ToFloat(*reinterpret_cast<const uint2*>(src), part.key_scales[at], k);
        Fp8x8ToFloat(*reinterpret_cast<const uint2*>(src + part.values_offset),
                     part.key_scales[part.scales_offset + at], v);
        uint4 k_packed, v_packed;
        uint32_t* kw = reinterpret_cast<uint32_t*>(&k_packed);
        uint32_t* vw = reinterpret_cast<uint32_t*>(&v_packed);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          kw[e] = PackBf16(k[2 * e], k[2 * e + 1]);
          vw[e] = PackBf16(v[2 * e], v[2 * e + 1]);
        }
        *reinterpret_cast<uint4*>(k_dst) = k_packed;
        *reinterpret_cast<uint4*>(v_dst) = v_packed;
      } else if (position < end_key) {
        const __nv_bfloat16* src = cache + table[position / bs] * a.paged.block_elements +
                                   head_offset + (position % bs) * D + piece * 8;
        __pipeline_memcpy_async(k_dst, src, 16);
        __pipeline_memcpy_async(v_dst, src + values_offset, 16);
      } else {
        *reinterpret_cast<uint4*>(k_dst) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(v_dst) = make_uint4(0, 0, 0, 0);
      }
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();

    // S = Q K^T: 8 tiles of 8 keys; s[n][0..1] row g, s[n][2..3] row g + 8, keys 8n + 2t + e.
    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const __nv_bfloat16* k = &keys[8 * n + g][ks * 16 + 2 * t];
        MmaBf16(s[n], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3],
                *reinterpret_cast<const uint32_t*>(k), *reinterpret_cast<const uint32_t*>(k + 8));
      }
    }
    // Causal mask and the online softmax, per row half (g, then g + 8).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t query_position = first_position + g + 8 * half;
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * half + e];
          if (key0 + 8 * n + 2 * t + e > query_position) x = -INFINITY;
          tile_max = fmaxf(tile_max, x);
        }
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(m[half], tile_max);
      // A row whose keys in this pass are all masked keeps its state (new_max may be -inf only
      // for padding rows, which are never written).
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = exp2f(m[half] - base);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * half + e];
          x = exp2f(x - base);
          sum += x;
        }
      }
      l[half] = l[half] * correction + sum;
      m[half] = new_max;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][2 * half] *= correction;
        o[j][2 * half + 1] *= correction;
      }
    }
    // O += P V: P's A fragments straight from the S accumulators; V's B fragments by ldmatrix.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a0 = PackBf16(s[2 * kk][0], s[2 * kk][1]);
      const uint32_t a1 = PackBf16(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int matrix = lane >> 3;
      const int row = kk * 16 + (matrix & 1) * 8 + (lane & 7);
#pragma unroll
      for (int j = 0; j < D / 8; j += 2) {
        uint32_t b[4];
        LdMatrixX4Trans(b, &values[row][j * 8 + (matrix >> 1) * 8]);
        MmaBf16(o[j], a0, a1, a2, a3, b[0], b[1]);
        MmaBf16(o[j + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
    __syncthreads();  // the next pass overwrites the staged keys and values
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = g + 8 * half;
    if (row >= rows) continue;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out_bf16) +
                         static_cast<int64_t>(first_row + row) * a.out_stride + q_head * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * j + 2 * t) =
          __floats2bfloat162_rn(o[j][2 * half] / sum, o[j][2 * half + 1] / sum);
    }
  }
}

template <int D>
cudaError_t LaunchForHeadDim(const PagedAttentionArgs& a, const int32_t* tiles, int32_t count,
                             cudaStream_t stream) {
  const dim3 grid(count, a.kv_heads);
  switch (a.q_heads / a.kv_heads) {
    case 1:
      PrefillAttentionKernel<D, 1><<<grid, 32, 0, stream>>>(a, tiles);
      break;
    case 2:
      PrefillAttentionKernel<D, 2><<<grid, 64, 0, stream>>>(a, tiles);
      break;
    case 4:
      PrefillAttentionKernel<D, 4><<<grid, 128, 0, stream>>>(a, tiles);
      break;
    case 8:
      PrefillAttentionKernel<D, 8><<<grid, 256, 0, stream>>>(a, tiles);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

bool PrefillAttentionSupports(int32_t q_heads, int32_t kv_heads, int32_t head_dim) {
  return PagedAttentionSupports(q_heads, kv_heads, head_dim);
}

cudaError_t LaunchPagedPrefillAttention(const PagedAttentionArgs& args,
                                        const int32_t* tile_first_row, int32_t num_tiles,
                                        cudaStream_t stream) {
  if (num_tiles == 0) return cudaSuccess;
  if (args.paged.cache == nullptr ||
      !PrefillAttentionSupports(args.q_heads, args.kv_heads, args.head_dim)) {
    return cudaErrorInvalidValue;
  }
  return args.head_dim == 64 ? LaunchForHeadDim<64>(args, tile_first_row, num_tiles, stream)
                             : LaunchForHeadDim<128>(args, tile_first_row, num_tiles, stream);
}

}  // namespace ridge::cuda
