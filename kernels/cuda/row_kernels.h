// Small fused row-wise kernels of the GPU forward pass. bf16 buffers are passed as void* so
// that host code compiled without nvcc can include this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ridge::cuda {

// out[r, :] = float(table[ids[r] - first_id, :]) for r < rows; table is bf16 [table_rows, C]
// holding the rows of ids [first_id, first_id + table_rows) (a tensor-parallel rank's slice of
// the vocabulary); rows of other ids are zeros.
cudaError_t LaunchEmbedRows(const int32_t* ids, const void* table_bf16, int64_t rows, int64_t cols,
                            float* out, cudaStream_t stream, int64_t first_id = 0,
                            int64_t table_rows = INT64_MAX);

// out[r, :] = bf16(in[src_r, :] / sqrt(mean(in[src_r, :]^2) + eps) * weight), where
// src_r = row_index[r] when row_index is given, else r.
cudaError_t LaunchRmsNormToBf16(const float* in, const int32_t* row_index, const float* weight,
                                int64_t rows, int64_t cols, float eps, void* out_bf16,
                                cudaStream_t stream);

// in: [rows, 2I] fp32 (gate | up); out[r, i] = bf16(silu(gate) * up). Element-parallel.
cudaError_t LaunchSwiGlu(const float* in, int64_t rows, int64_t inter, void* out_bf16,
                         cudaStream_t stream);

// out[r] = argmax of logits[r, 0:cols) (the lowest index among equal maxima); rows are
// `stride` floats apart.
cudaError_t LaunchArgmaxRows(const float* logits, int64_t rows, int64_t cols, int64_t stride,
                             int32_t* out, cudaStream_t stream);

}  // namespace ridge::cuda
