#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/bf16_mma.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/few_rows_gemm.h"

namespace ridge::cuda {
namespace {

constexpr int kMaxWarps = 16;
constexpr int kMaxK = 4096;

// k-blocks of 32 a warp loads at once. One k-block's loads are 4 (n_tiles + 2 m_tiles) registers
// a lane and the accumulators 4 m_tiles n_tiles: about 100 registers for both (8 k-blocks at one
// 16-row tile of 8 columns, as the kernel had when it took only that shape), within the 128 a
// thread of a 512-thread block may have.
__host__ __device__ constexpr int BlocksPerWarp(int m_tiles, int n_tiles) {
  const int blocks = (100 - 4 * m_tiles * n_tiles) / (4 * (n_tiles + 2 * m_tiles));
  return blocks > 1 ? blocks : 1;
}

// Block b computes columns [8 NT b, + 8 NT) of y for rows [0, 16 MT) (those < rows). In a block
// of 32 along k, lane (g, t) = (lane / 4, lane % 4) loads 16 bytes: k in [8t, 8t + 8) of weight
// row 8 NT b + 8 j + g for each n-tile j and of x rows 16 i + g and 16 i + g + 8 for each m-tile
// i. An mma's k order is any order both operands share, so the first 4 of those 8 k feed one
// m16n8k16 and the last 4 the next: for k16 index kappa = 2t + 8j + e of mma s (j, e in {0, 1})
// the element is k = 8t + 4s + 2j + e, which puts the fragment registers the mma wants (A: rows
// g, g+8 at kappa 2t, 2t+1, then at 2t+8, 2t+9; B: column g at the same kappa) in the 32-bit
// halves of the loaded 16 bytes in order.
template <int MT, int NT>
__global__ void __launch_bounds__(kMaxWarps * 32) FewRowsGemmKernel(FewRowsGemmArgs a) {
  constexpr int kBlocks = BlocksPerWarp(MT, NT), kTiles = MT * NT;
  extern __shared__ float4 partial[];  // [warps][kTiles][32]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warps = blockDim.x >> 5, k_blocks = a.k / 32;
  const int column0 = blockIdx.x * 8 * NT;
  const int64_t k = a.k;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  // The weights first: nothing writes them, so they load while the previous kernel finishes.
  // When k has more blocks than the warps take at once, each takes them in rounds.
  uint4 wv[kBlocks][NT];
  auto load_weights = [&](int first) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n = column0 + 8 * j + g;
      const uint4* w_row =
          reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.w) +
                                         static_cast<int64_t>(n < a.n ? n : a.n - 1) * k) +
          t;
#pragma unroll
      for (int i = 0; i < kBlocks; ++i) {
        const int kb = first + i;
        wv[i][j] = kb < k_blocks && n < a.n ? __ldg(w_row + kb * 4) : zero;
      }
    }
  };
  load_weights(warp * kBlocks);
  WaitForPreviousKernel();

  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
  float c[MT][NT][4] = {};
  for (int first = warp * kBlocks; first < k_blocks; first += warps * kBlocks) {
    if (first != warp * kBlocks) load_weights(first);
    uint4 xv[kBlocks][MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * m + 8 * h + g;
        const uint4* x_row = reinterpret_cast<const uint4*>(x + (row < a.rows ? row : 0) * k) + t;
#pragma unroll
        for (int i = 0; i < kBlocks; ++i) {
          const int kb = first + i;
          xv[i][m][h] = kb < k_blocks && row < a.rows ? x_row[kb * 4] : zero;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kBlocks; ++i) {
      if (first + i >= k_blocks) break;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint4 lo = xv[i][m][0], hi = xv[i][m][1], w = wv[i][j];
          MmaBf16(c[m][j], lo.x, hi.x, lo.y, hi.y, w.x, w.y);
          MmaBf16(c[m][j], lo.z, hi.z, lo.w, hi.w, w.z, w.w);
        }
      }
    }
  }

  // c[m][j][0], [1]: row 16 m + g, columns 8 j + 2t and + 1 of the block's; [2], [3]: row + 8.
  // The warps' partial sums meet in shared memory and are added in warp order.
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      partial[(warp * kTiles + m * NT + j) * 32 + lane] =
          make_float4(c[m][j][0], c[m][j][1], c[m][j][2], c[m][j][3]);
    }
  }
  __syncthreads();
  for (int tile = warp; tile < kTiles; tile += warps) {
    float4 sum = partial[tile * 32 + lane];
    for (int w = 1; w < warps; ++w) {
      const float4 p = partial[(w * kTiles + tile) * 32 + lane];
      sum.x += p.x;
      sum.y += p.y;
      sum.z += p.z;
      sum.w += p.w;
    }
    const int row = 16 * (tile / NT) + g, col = column0 + 8 * (tile % NT) + 2 * t;
    auto put = [&](int r, int column, float v) {
      if (r >= a.rows || column >= a.n) return;
      float* out = a.y + static_cast<int64_t>(r) * a.y_stride + column;
      *out = a.accumulate ? *out + v : v;
    };
    put(row, col, sum.x);
    put(row, col + 1, sum.y);
    put(row + 8, col, sum.z);
    put(row + 8, col + 1, sum.w);
  }
}

template <int MT, int NT>
cudaError_t LaunchTiles(const FewRowsGemmArgs& args, cudaStream_t stream) {
  const int k_blocks = args.k / 32;
  const int warps =
      std::min(kMaxWarps, (k_blocks + BlocksPerWarp(MT, NT) - 1) / BlocksPerWarp(MT, NT));
  const int blocks = (args.n + 8 * NT - 1) / (8 * NT);
  const size_t smem = static_cast<size_t>(warps) * MT * NT * 32 * sizeof(float4);
  return LaunchDependent(FewRowsGemmKernel<MT, NT>, dim3(blocks), dim3(warps * 32), smem, stream,
                         args);
}

template <int MT>
cudaError_t LaunchRowTiles(const FewRowsGemmArgs& args, int n_tiles, cudaStream_t stream) {
  return n_tiles == 1 ? LaunchTiles<MT, 1>(args, stream) : LaunchTiles<MT, 2>(args, stream);
}

int RowTiles(int64_t rows) { return static_cast<int>((rows + 15) / 16); }

}  // namespace

bool FewRowsGemmSupports(int64_t rows, int64_t n, int64_t k) {
  if (rows < 1 || rows > kFewRowsMax || n < 1 || n > (int64_t{1} << 30)) return false;
  return k >= 32 && k % 32 == 0 && k <= kMaxK;
}

cudaError_t LaunchFewRowsGemmTiles(const FewRowsGemmArgs& args, int n_tiles, cudaStream_t stream) {
  if (!FewRowsGemmSupports(args.rows, args.n, args.k) || (n_tiles != 1 && n_tiles != 2)) {
    return cudaErrorInvalidValue;
  }
  return RowTiles(args.rows) == 1 ? LaunchRowTiles<1>(args, n_tiles, stream)
                                  : LaunchRowTiles<2>(args, n_tiles, stream);
}

cudaError_t LaunchFewRowsGemm(const FewRowsGemmArgs& args, int sm_count, cudaStream_t stream) {
  const bool wide = args.rows > 8 && args.n >= int64_t{8} * sm_count;
  return LaunchFewRowsGemmTiles(args, wide ? 2 : 1, stream);
}

}  // namespace ridge::cuda
