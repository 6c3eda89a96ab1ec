// Products of a decode step with few rows (up to kFewRowsMax tokens): y[rows, n] (+)= x[rows, k]
// w[n, k]^T, bf16 inputs, fp32 accumulation and output, on the tensor cores (mma.sync
// m16n8k16). At these sizes a product is a stream of its weights, and cuBLAS's kernels took 3
// to 7 us in a CUDA graph for 1.2 to 6.3 MB (H200, 140M shapes), where reading the weights at
// the copy ceiling takes 0.3 to 1.5: this kernel has each warp issue every load of its share at
// once, starts loading its weights before the kernel ahead of it in the stream has finished
// (programmatic dependent launch: the weights are never written), and only then waits for its
// inputs.
//
// One block per 8 or 16 output columns (one or two n-tiles) and every row (one or two m-tiles of
// 16); its warps split k and add their partial sums in shared memory, so results do not depend
// on timing. Every block reads all rows of x, so x's L2 traffic is rows / columns a block times
// the weights': past 32 rows cuBLAS is faster (H200, 140M products: at 48 and 64 rows the
// in-projection and gate_up took 1.3x to 1.9x cuBLAS's time; tools/bench/RESULTS.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ridge::cuda {

inline constexpr int64_t kFewRowsMax = 32;

struct FewRowsGemmArgs {
  const void* x;  // bf16 [rows, k], rows k apart, 16-byte aligned
  const void* w;  // bf16 [n, k], rows k apart, 16-byte aligned
  float* y;       // fp32 [rows, y_stride]
  int32_t rows, n, k, y_stride;
  bool accumulate;  // y += x w^T instead of y = x w^T
};

// Whether LaunchFewRowsGemm takes these sizes: 1 <= rows <= kFewRowsMax, n >= 1, k a positive
// multiple of 32 up to 4096.
bool FewRowsGemmSupports(int64_t rows, int64_t n, int64_t k);

// Blocks of 16 columns when there are more than 8 rows and the product is wide enough to give
// half of the sm_count SMs such a block, else of 8. (H200, us a product at 24 rows: 140M's
// o_proj, 768 columns, 2.75 with blocks of 8 and 2.83 with 16; 1B's, 1536 columns, 6.79 and 4.81;
// cuBLAS 3.23 and 5.01.)
cudaError_t LaunchFewRowsGemm(const FewRowsGemmArgs& args, int sm_count, cudaStream_t stream);

// The same with blocks of 8 n_tiles columns (n_tiles 1 or 2; benchmarks and tests compare them).
cudaError_t LaunchFewRowsGemmTiles(const FewRowsGemmArgs& args, int n_tiles, cudaStream_t stream);

}  // namespace ridge::cuda
