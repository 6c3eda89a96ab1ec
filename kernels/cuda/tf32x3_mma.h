// fp32-accurate products on the TF32 tensor cores (3xTF32) with mma.sync m16n8k8, for operands
// kept in shared memory in fragment order (kernels/mma_fragment_order.h: one 16-byte load a lane
// per A fragment, one 8-byte load per B fragment, where row-major tiles need four and two 4-byte
// loads; the chunked prefill's CG products were bound by those loads). Device code only.
#pragma once

#include <cstdint>

#include "kernels/mma_fragment_order.h"

namespace ridge::cuda {

// x = hi + lo with hi x's nearest TF32 value (ties away from zero, by integer arithmetic) and lo
// = x - hi exact; lo goes to the tensor cores as it is, which read a TF32 operand's top 19 bits,
// so it loses at most 2^-10 of itself, 2^-21 of x. (cvt.rna.tf32 through wmma's
// __float_to_tf32 cost about nine instructions an element with its infinity checks.)
__device__ __forceinline__ float Tf32High(float x) {
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

struct FragmentA {
  uint32_t hi[4], lo[4];
};
struct FragmentB {
  uint32_t hi[2], lo[2];
};

// x with half a TF32 ulp added (low bits left as they are), for an operand of single-pass
// products only: the tensor cores truncate it to x rounded to the nearest TF32 value, and one
// integer add is all it costs (Tf32High also clears the low bits).
__device__ __forceinline__ float Tf32ForSinglePass(float x) {
  return __uint_as_float(__float_as_uint(x) + 0x1000u);
}

__device__ __forceinline__ void SplitInto(float x, uint32_t& hi, uint32_t& lo) {
  const float high = Tf32High(x);
  hi = __float_as_uint(high);
  lo = __float_as_uint(x - high);
}

// Loads for one pass (kSinglePass) take the operand's bits as they are, for operands stored
// through Tf32ForSinglePass (the tensor cores would truncate them otherwise), and leave lo unset.
// (Rounding at every load was about 40% of the instructions of the prefill solve's main product
// loop; truncating instead left 2 to 4 times as many bf16 outputs of the tolerance-0 prefill test
// off the rounded reference.)
template <bool kSinglePass>
__device__ __forceinline__ void LoadOperand(float x, uint32_t& hi, uint32_t& lo) {
  if constexpr (kSinglePass) {
    hi = __float_as_uint(x);
  } else {
    SplitInto(x, hi, lo);
  }
}

// A fragment `tile` (row of tiles * cols / 8 + column of tiles) of a fragment-order A operand.
template <bool kSinglePass = false>
__device__ __forceinline__ FragmentA LoadFragmentA(const float* a, int tile) {
  const float4 v = reinterpret_cast<const float4*>(a)[tile * 32 + (threadIdx.x & 31)];
  FragmentA f;
  LoadOperand<kSinglePass>(v.x, f.hi[0], f.lo[0]);
  LoadOperand<kSinglePass>(v.y, f.hi[1], f.lo[1]);
  LoadOperand<kSinglePass>(v.z, f.hi[2], f.lo[2]);
  LoadOperand<kSinglePass>(v.w, f.hi[3], f.lo[3]);
  return f;
}

// B fragment `tile` (row of tiles * cols / 8 + column of tiles) of a fragment-order B operand.
template <bool kSinglePass = false>
__device__ __forceinline__ FragmentB LoadFragmentB(const float* b, int tile) {
  const float2 v = reinterpret_cast<const float2*>(b)[tile * 32 + (threadIdx.x & 31)];
  FragmentB f;
  LoadOperand<kSinglePass>(v.x, f.hi[0], f.lo[0]);
  LoadOperand<kSinglePass>(v.y, f.hi[1], f.lo[1]);
  return f;
}

__device__ __forceinline__ void MmaTf32(float (&c)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a * b to about fp32 accuracy: the small terms first, then hi * hi.
__device__ __forceinline__ void MmaTf32x3(float (&c)[4], const FragmentA& a, const FragmentB& b) {
  MmaTf32(c, a.lo, b.hi);
  MmaTf32(c, a.hi, b.lo);
  MmaTf32(c, a.hi, b.hi);
}

// c += a * b in one pass (fragments loaded <true> from operands rounded to TF32: about 2^-11
// relative error each), or to about fp32 accuracy (MmaTf32x3, fragments split).
template <bool kSinglePass>
__device__ __forceinline__ void MmaTf32Pass(float (&c)[4], const FragmentA& a, const FragmentB& b) {
  if constexpr (kSinglePass) {
    MmaTf32(c, a.hi, b.hi);
  } else {
    MmaTf32x3(c, a, b);
  }
}

}  // namespace ridge::cuda
