// The bf16 tensor-core primitives the GPU kernels share (mma.sync m16n8k16 with fp32
// accumulation, ldmatrix, packing). Fragment layouts of m16n8k16, lane = 4 g + t:
//   A (16 x 16, row-major): a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..),
//                           a3 = (g + 8, 2t + 8..)
//   B (16 x 8, column-major): b0 = (2t..2t+1, g), b1 = (2t + 8.., g)
//   C (16 x 8): c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..2t+1)
// Device code only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ridge::cuda {

__device__ __forceinline__ void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as the bf16 pair of one fragment register (the first in the low half).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Four 8x8 bf16 matrices from shared memory, transposed: lanes 8m..8m+7 give the row addresses
// of matrix m; each lane receives, of matrix m, the elements (2t, g) and (2t + 1, g) in r[m].
// Of a row-major [k, n] tile, matrices (k 0-7, n 0-7), (k 8-15, n 0-7) give the B fragment
// (b0, b1) of columns n 0-7 of an m16n8k16.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_address) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

}  // namespace ridge::cuda
