#include <cuda_bf16.h>

#include "kernels/cuda/fp8_kv.h"
#include "kernels/cuda/qk_rope.h"

namespace ridge::cuda {
namespace {

constexpr int kWarps = 4;

__device__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One block per row, a warp per head: lane holds the rotation pairs (i, i + D/2) for
// i = lane + 32 k, k < D / 64.
template <int D>
__global__ void __launch_bounds__(32 * kWarps) QkRopeKernel(QkRopeArgs a) {
  constexpr int kPairs = D / 64, kHalf = D / 2;
  const int r = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int seq = a.step.row_sequence[r];
  const int64_t position = a.step.start_position[seq] + (r - a.step.row_begin[seq]);
  float* row = a.proj + static_cast<int64_t>(r) * a.proj_stride;
  float cos_t[kPairs], sin_t[kPairs];
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    double s, c;
    sincos(static_cast<double>(position) * a.inv_freq[lane + 32 * k], &s, &c);
    cos_t[k] = static_cast<float>(c * a.attention_factor);
    sin_t[k] = static_cast<float>(s * a.attention_factor);
  }
  __nv_bfloat16* keys = nullptr;
  if (a.kv.cache != nullptr && !a.kv.fp8) {
    const int32_t block = a.step.block_tables[a.step.table_begin[seq] + position / a.kv.block_size];
    keys = static_cast<__nv_bfloat16*>(a.kv.cache) + block * a.kv.block_elements +
           a.kv.layer_offset + (position % a.kv.block_size) * D;
  }
  const int64_t head_stride = static_cast<int64_t>(a.kv.block_size) * D;  // in the block
  const int64_t values_offset = static_cast<int64_t>(a.kv_heads) * head_stride;
  for (int head = warp; head < a.q_heads + 2 * a.kv_heads; head += kWarps) {
    float* x = row + head * D;
    float lo[kPairs], hi[kPairs];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      lo[k] = x[lane + 32 * k];
      hi[k] = x[lane + 32 * k + kHalf];
    }
    const bool is_value = head >= a.q_heads + a.kv_heads;
    if (!is_value) {
      const float* weight = head < a.q_heads ? a.q_norm : a.k_norm;
      float squares = 0.0f;
#pragma unroll
      for (int k = 0; k < kPairs; ++k) squares += lo[k] * lo[k] + hi[k] * hi[k];
      const float scale = rsqrtf(WarpSum(squares) / D + a.norm_eps);
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const int i = lane + 32 * k;
        const float x1 = lo[k] * scale * weight[i], x2 = hi[k] * scale * weight[i + kHalf];
        lo[k] = x1 * cos_t[k] - x2 * sin_t[k];
        hi[k] = x2 * cos_t[k] + x1 * sin_t[k];
        x[i] = lo[k];
        x[i + kHalf] = hi[k];
      }
    }
    if (a.kv.fp8 && a.kv.cache != nullptr && head >= a.q_heads) {
      const int kv_head = is_value ? head - a.q_heads - a.kv_heads : head - a.q_heads;
      float largest = 0.0f;
#pragma unroll
      for (int k = 0; k < kPairs; ++k) largest = fmaxf(largest, fmaxf(fabsf(lo[k]), fabsf(hi[k])));
      for (int offset = 16; offset > 0; offset >>= 1) {
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
      }
      const float scale = largest > 0.0f ? largest / kFp8Max : 1.0f;
      const int32_t block =
          a.step.block_tables[a.step.table_begin[seq] + position / a.kv.block_size];
      const Fp8KvPart part = Fp8PartOf(a.kv, block, a.kv_heads, D);
      const int64_t at =
          static_cast<int64_t>(kv_head) * a.kv.block_size + position % a.kv.block_size;
      uint8_t* dst = const_cast<uint8_t*>(part.keys) + (is_value ? part.values_offset : 0) + at * D;
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        dst[lane + 32 * k] = FloatToFp8(lo[k] / scale);
        dst[lane + 32 * k + kHalf] = FloatToFp8(hi[k] / scale);
      }
      if (lane == 0) {
        const_cast<float*>(part.key_scales)[(is_value ? part.scales_offset : 0) + at] = scale;
      }
    } else if (keys != nullptr && head >= a.q_heads) {
      const int kv_head = is_value ? head - a.q_heads - a.kv_heads : head - a.q_heads;
      __nv_bfloat16* dst = keys + (is_value ? values_offset : 0) + kv_head * head_stride;
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        dst[lane + 32 * k] = __float2bfloat16(lo[k]);
        dst[lane + 32 * k + kHalf] = __float2bfloat16(hi[k]);
      }
    }
  }
}

__global__ void RingWriteKernel(RingWriteArgs a) {
  const int r = blockIdx.x;
  const int seq = a.step.row_sequence[r];
  const int32_t offset = r - a.step.row_begin[seq], count = a.step.row_count[seq];
  if (offset < count - a.ring.window) return;  // overwritten later in the same step
  const int64_t position = a.step.start_position[seq] + offset;
  float* keys = a.ring.state_pool + a.step.slot[seq] * a.ring.slot_floats + a.ring.ring_offset;
  float* values = keys + static_cast<int64_t>(a.ring.window) * a.kv_width;
  const int64_t ring_row = (position % a.ring.window) * a.kv_width;
  const float* k = a.proj + static_cast<int64_t>(r) * a.proj_stride + a.k_column;
  for (int c = threadIdx.x; c < a.kv_width; c += blockDim.x) {
    keys[ring_row + c] = k[c];
    values[ring_row + c] = k[a.kv_width + c];
  }
}

}  // namespace

cudaError_t LaunchQkRope(const QkRopeArgs& args, cudaStream_t stream) {
  if (args.step.rows == 0) return cudaSuccess;
  if (args.head_dim == 64) {
    QkRopeKernel<64><<<args.step.rows, 32 * kWarps, 0, stream>>>(args);
  } else if (args.head_dim == 128) {
    QkRopeKernel<128><<<args.step.rows, 32 * kWarps, 0, stream>>>(args);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRingWrite(const RingWriteArgs& args, cudaStream_t stream) {
  if (args.step.rows == 0) return cudaSuccess;
  RingWriteKernel<<<args.step.rows, 256, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
