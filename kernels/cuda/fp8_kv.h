// Device helpers for the fp8 (e4m3) KV cache (layout: PagedKv in kernels/cuda/attention_rows.h):
// where a (position, kv head)'s bytes and scales lie, and the conversions. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/attention_rows.h"

namespace ridge::cuda {

// e4m3's largest finite magnitude.
inline constexpr float kFp8Max = 448.0f;

// One layer's fp8 part of the blocks: keys, values and their scales.
struct Fp8KvPart {
  const uint8_t* keys;  // [kv_heads, block_size, D]; values follow at values_offset
  int64_t values_offset;
  const float* key_scales;  // [kv_heads, block_size]; the values' follow at scales_offset
  int64_t scales_offset;
};

__device__ __forceinline__ Fp8KvPart Fp8PartOf(const PagedKv& kv, int32_t block, int kv_heads,
                                               int head_dim) {
  const uint8_t* base =
      static_cast<const uint8_t*>(kv.cache) + block * kv.block_elements + kv.layer_offset;
  const int64_t elements = static_cast<int64_t>(kv_heads) * kv.block_size * head_dim;
  return {base, elements, reinterpret_cast<const float*>(base + 2 * elements),
          static_cast<int64_t>(kv_heads) * kv.block_size};
}

// Eight e4m3 values times `scale`.
__device__ __forceinline__ void Fp8x8ToFloat(uint2 raw, float scale, float* out) {
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * pair)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      out[4 * w + 2 * pair] = f.x * scale;
      out[4 * w + 2 * pair + 1] = f.y * scale;
    }
  }
}

__device__ __forceinline__ uint8_t FloatToFp8(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace ridge::cuda
