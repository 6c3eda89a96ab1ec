#include <cuda_bf16.h>

#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/few_rows_gemm.h"

namespace ridge::cuda {
namespace {

// Every warp takes up to kBlocksPerWarp blocks of 32 along k, all of whose loads it issues at
// once; a block has as many warps as k needs (k / 256, rounded up).
constexpr int kBlocksPerWarp = 8;
constexpr int kMaxWarps = 16;  // k <= 4096

__device__ __forceinline__ void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Block b computes columns [8b, 8b + 8) of y for rows [0, 16) (those < rows). In a block of
// 32 along k, lane (g, t) = (lane / 4, lane % 4) loads 16 bytes: k in [8t, 8t + 8) of weight
// row 8b + g and of x rows g and g + 8. An mma's k order is any order both operands share, so
// the first 4 of those 8 k feed one m16n8k16 and the last 4 the next: for k16 index
// kappa = 2t + 8j + e of mma s (j, e in {0, 1}) the element is k = 8t + 4s + 2j + e, which puts
// the fragment registers the mma wants (A: rows g, g+8 at kappa 2t, 2t+1, then at 2t+8, 2t+9;
// B: column g at the same kappa) in the 32-bit halves of the loaded 16 bytes in order.
__global__ void __launch_bounds__(kMaxWarps * 32) FewRowsGemmKernel(FewRowsGemmArgs a) {
  __shared__ float4 partial[kMaxWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warps = blockDim.x >> 5, k_blocks = a.k / 32, first = warp * kBlocksPerWarp;
  const int n = blockIdx.x * 8 + g;
  const int64_t k = a.k;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  // The weights first: nothing writes them, so they load while the previous kernel finishes.
  const uint4* w_row =
      reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.w) +
                                     static_cast<int64_t>(n < a.n ? n : a.n - 1) * k) +
      t;
  uint4 wv[kBlocksPerWarp];
#pragma unroll
  for (int i = 0; i < kBlocksPerWarp; ++i) {
    const int kb = first + i;
    wv[i] = kb < k_blocks && n < a.n ? __ldg(w_row + kb * 4) : zero;
  }
  WaitForPreviousKernel();

  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
  const bool low_row = g < a.rows, high_row = g + 8 < a.rows;
  const uint4* x_low = reinterpret_cast<const uint4*>(x + (low_row ? g : 0) * k) + t;
  const uint4* x_high = reinterpret_cast<const uint4*>(x + (high_row ? g + 8 : 0) * k) + t;
  uint4 lo[kBlocksPerWarp], hi[kBlocksPerWarp];
#pragma unroll
  for (int i = 0; i < kBlocksPerWarp; ++i) {
    const int kb = first + i;
    lo[i] = kb < k_blocks && low_row ? x_low[kb * 4] : zero;
    hi[i] = kb < k_blocks && high_row ? x_high[kb * 4] : zero;
  }
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kBlocksPerWarp; ++i) {
    if (first + i >= k_blocks) break;
    MmaBf16(c, lo[i].x, hi[i].x, lo[i].y, hi[i].y, wv[i].x, wv[i].y);
    MmaBf16(c, lo[i].z, hi[i].z, lo[i].w, hi[i].w, wv[i].z, wv[i].w);
  }

  // c[0], c[1]: row g, columns 2t and 2t + 1 of the block's 8; c[2], c[3]: row g + 8.
  partial[warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
  __syncthreads();
  if (warp != 0) return;
  float4 sum = partial[0][lane];
  for (int w = 1; w < warps; ++w) {
    const float4 p = partial[w][lane];
    sum.x += p.x;
    sum.y += p.y;
    sum.z += p.z;
    sum.w += p.w;
  }
  const int col = blockIdx.x * 8 + 2 * t;
  auto put = [&](int row, int column, float v) {
    if (row >= a.rows || column >= a.n) return;
    float* out = a.y + static_cast<int64_t>(row) * a.y_stride + column;
    *out = a.accumulate ? *out + v : v;
  };
  put(g, col, sum.x);
  put(g, col + 1, sum.y);
  put(g + 8, col, sum.z);
  put(g + 8, col + 1, sum.w);
}

}  // namespace

bool FewRowsGemmSupports(int64_t rows, int64_t n, int64_t k) {
  return rows >= 1 && rows <= kFewRowsMax && n >= 1 && n <= (int64_t{1} << 30) && k >= 32 &&
         k % 32 == 0 && k <= 32 * kBlocksPerWarp * kMaxWarps;
}

cudaError_t LaunchFewRowsGemm(const FewRowsGemmArgs& args, cudaStream_t stream) {
  if (!FewRowsGemmSupports(args.rows, args.n, args.k)) return cudaErrorInvalidValue;
  const int k_blocks = args.k / 32;
  const int warps = (k_blocks + kBlocksPerWarp - 1) / kBlocksPerWarp;
  const int blocks = (args.n + 7) / 8;
  return LaunchDependent(FewRowsGemmKernel, dim3(blocks), dim3(warps * 32), 0, stream, args);
}

}  // namespace ridge::cuda
