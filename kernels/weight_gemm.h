// Products with weights kept in the checkpoint's element type (fp32, fp16 or bf16), read where
// they lie (a memory-mapped file or a buffer), never copied whole to fp32: a 16-bit weight is
// widened a tile of rows at a time into a small per-thread buffer just before BLAS uses it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace ridge {

// A row-major [rows, cols] matrix (a PyTorch Linear weight: [out, in]).
struct WeightMatrix {
  const std::byte* data = nullptr;  // not necessarily aligned
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;

  bool empty() const { return data == nullptr; }
  static WeightMatrix Fp32(const float* data, int64_t rows, int64_t cols);
};

// y[r, 0:w.rows] (+)= x[r, :] * w^T for r < rows; x is [rows, w.cols] (dense), y's rows are
// `y_stride` floats apart, so a product can fill some columns of a wider buffer.
void MatMulWeights(const float* x, int64_t rows, const WeightMatrix& w, float* y, int64_t y_stride,
                   bool accumulate);

// out[0:cols] = w[row, :] as floats (an embedding lookup).
void WeightRowToFloat(const WeightMatrix& w, int64_t row, float* out);

}  // namespace ridge
