#include "kernels/gemm.h"

#include <cblas.h>

namespace ridge {

void MatMulTransposed(const float* x, int rows, int in, const float* w, int out, float* y,
                      bool accumulate) {
  if (rows == 0 || out == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, w, in,
              accumulate ? 1.0f : 0.0f, y, out);
}

}  // namespace ridge
