// Tensor-core products for operands kept in shared memory in fragment order
// (kernels/mma_fragment_order.h: one 16-byte load a lane per A fragment, one 8-byte load per B
// fragment, where row-major tiles need four and two 4-byte loads; the chunked prefill's CG
// products were bound by those loads): fp32-accurate ones on the TF32 tensor cores (3xTF32,
// mma.sync m16n8k8), and single-pass ones on the f16 tensor cores (m16n8k16, twice the TF32 rate
// and as many significand bits, for operands the caller has scaled into f16's range). Device
// code only.
#pragma once

#include <cuda_fp16.h>

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

__device__ __forceinline__ void SplitInto(float x, uint32_t& hi, uint32_t& lo) {
  const float high = Tf32High(x);
  hi = __float_as_uint(high);
  lo = __float_as_uint(x - high);
}

// Loads for f16 products (kHalf) take the 32-bit words as they are, two halves each, stored in
// the f16 fragment order (AHalfOffset, BHalfOffset), and leave lo unset. (Rounding fp32 operands
// to TF32 at every load was about 40% of the instructions of the prefill solve's main product
// loop.)
template <bool kHalf>
__device__ __forceinline__ void LoadOperand(float x, uint32_t& hi, uint32_t& lo) {
  if constexpr (kHalf) {
    hi = __float_as_uint(x);
  } else {
    SplitInto(x, hi, lo);
  }
}

// A fragment `tile` (row of tiles * cols / 8 + column of tiles; cols / 16 with kHalf) of a
// fragment-order A operand.
template <bool kHalf = false>
__device__ __forceinline__ FragmentA LoadFragmentA(const float* a, int tile) {
  const float4 v = reinterpret_cast<const float4*>(a)[tile * 32 + (threadIdx.x & 31)];
  FragmentA f;
  LoadOperand<kHalf>(v.x, f.hi[0], f.lo[0]);
  LoadOperand<kHalf>(v.y, f.hi[1], f.lo[1]);
  LoadOperand<kHalf>(v.z, f.hi[2], f.lo[2]);
  LoadOperand<kHalf>(v.w, f.hi[3], f.lo[3]);
  return f;
}

// B fragment `tile` (row of tiles * cols / 8 + column of tiles) of a fragment-order B operand
// (its tiles 8 x 8, or 16 x 8 with kHalf).
template <bool kHalf = false>
__device__ __forceinline__ FragmentB LoadFragmentB(const float* b, int tile) {
  const float2 v = reinterpret_cast<const float2*>(b)[tile * 32 + (threadIdx.x & 31)];
  FragmentB f;
  LoadOperand<kHalf>(v.x, f.hi[0], f.lo[0]);
  LoadOperand<kHalf>(v.y, f.hi[1], f.lo[1]);
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

// c += a * b, 16 x 16 f16 times 16 x 8 f16 (two elements a register), fp32 accumulation.
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4],
                                       const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Contraction length of one MMA: 8 for 3xTF32, 16 for f16.
template <bool kHalf>
constexpr int kMmaK = kHalf ? 16 : 8;

// c += a * b over kMmaK<kHalf>: in one f16 pass (fragments loaded <true>; operands rounded to
// f16 carry about 2^-11 relative error, as TF32's do), or to about fp32 accuracy (MmaTf32x3,
// fragments split). kExactA: a's elements are TF32 values already (its fragments loaded
// unsplit, <true>), so a.lo would be zero and fp32 accuracy takes two passes.
template <bool kHalf, bool kExactA = false>
__device__ __forceinline__ void MmaPass(float (&c)[4], const FragmentA& a, const FragmentB& b) {
  if constexpr (kHalf) {
    MmaF16(c, a.hi, b.hi);
  } else if constexpr (kExactA) {
    MmaTf32(c, a.hi, b.lo);
    MmaTf32(c, a.hi, b.hi);
  } else {
    MmaTf32x3(c, a, b);
  }
}

// (lo, hi) rounded to f16 (nearest, ties to even) in one 32-bit word, lo in the low half: two
// consecutive elements of an f16 fragment.
__device__ __forceinline__ uint32_t PackHalves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 2^-e for the power of two 2^e <= |x| < 2^(e+1), a scale that brings x into [1, 2); zero and
// subnormals get 2^126, values from 2^126 up (and non-finite ones) 2^-126, so it stays finite.
__device__ __forceinline__ float PowerOfTwoScale(float x) {
  const int biased = min(max(static_cast<int>((__float_as_uint(x) >> 23) & 0xffu), 1), 253);
  return __uint_as_float(static_cast<uint32_t>(254 - biased) << 23);
}

}  // namespace ridge::cuda
