// Dense products on the CPU through BLAS.
#pragma once

namespace ridge {

// y[rows, out] (+)= x[rows, in] * w[out, in]^T: the layout of a PyTorch Linear weight.
void MatMulTransposed(const float* x, int rows, int in, const float* w, int out, float* y,
                      bool accumulate);

}  // namespace ridge
