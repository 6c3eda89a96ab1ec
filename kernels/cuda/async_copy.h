// Row tiles copied from global into shared memory with cp.async: every piece of a tile is in
// flight at once, where plain loads in a loop that the compiler does not unroll wait one memory
// round trip per piece (seen in the chunked prefill: 16 to 32 serial round trips per tile, with
// one block per SM and nothing else to hide them). Device code only.
#pragma once

#include <cuda_pipeline.h>

#include <cstdint>

namespace ridge::cuda {

// Issues the copies of rows [0, rows) x columns [0, Cols) of src (rows src_stride floats apart)
// to dst (rows dst_stride floats apart), spread over the block's threads: 16-byte pieces when
// every row of both starts 16-byte aligned, else 4-byte ones. The caller commits, waits
// (__pipeline_wait_prior) and synchronises the block before reading dst.
template <int Cols>
__device__ __forceinline__ void CopyRowsAsync(float* dst, int dst_stride, const float* src,
                                              int64_t src_stride, int rows) {
  const bool wide = Cols % 4 == 0 && dst_stride % 4 == 0 && src_stride % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (wide) {
    constexpr int kCols4 = Cols / 4;
    for (int i = threadIdx.x; i < rows * kCols4; i += blockDim.x) {
      const int r = i / kCols4, c = i % kCols4 * 4;
      __pipeline_memcpy_async(dst + r * dst_stride + c, src + r * src_stride + c, 16);
    }
  } else {
    for (int i = threadIdx.x; i < rows * Cols; i += blockDim.x) {
      const int r = i / Cols, c = i % Cols;
      __pipeline_memcpy_async(dst + r * dst_stride + c, src + r * src_stride + c, 4);
    }
  }
}

}  // namespace ridge::cuda
