#include "kernels/weight_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/half.h"

namespace ridge {
namespace {

// Rows of a 16-bit weight widened per BLAS call: 64 KiB-1 MiB of floats for widths 256-4096,
// small enough to stay in cache between the widening and the product.
constexpr int64_t kTileRows = 64;

void WidenRows(const WeightMatrix& w, int64_t first, int64_t count, float* out) {
  const int64_t n = count * w.cols;
  const std::byte* src = w.data + first * w.cols * DTypeSize(w.dtype);
  if (w.dtype == DType::kF32) {
    std::memcpy(out, src, n * sizeof(float));
    return;
  }
  const bool bf16 = w.dtype == DType::kBF16;
#pragma omp parallel for if (n > 1 << 16)
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    out[i] = bf16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
  }
}

// Up to this many rows, a bf16 product reads each weight row once and widens it in registers
// (a decode step's products): widening whole tiles into memory first costs a write and a read
// of every weight as fp32.
constexpr int64_t kFusedBf16Rows = 8;

float Bf16Dot(const float* x, const uint16_t* w, int64_t n) {
  float part[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int lane = 0; lane < 8; ++lane) {
      const uint32_t bits = static_cast<uint32_t>(w[k + lane]) << 16;
      float weight;
      std::memcpy(&weight, &bits, sizeof(weight));
      part[lane] += x[k + lane] * weight;
    }
  }
  float sum =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; k < n; ++k) sum += x[k] * Bf16ToFloat(w[k]);
  return sum;
}

void FusedBf16Product(const float* x, int64_t rows, const WeightMatrix& w, float* y,
                      int64_t y_stride, bool accumulate) {
  const auto* weights = reinterpret_cast<const uint16_t*>(w.data);
#pragma omp parallel for schedule(static) if (w.rows * w.cols > 1 << 14)
  for (int64_t j = 0; j < w.rows; ++j) {
    const uint16_t* row = weights + j * w.cols;
    for (int64_t r = 0; r < rows; ++r) {
      const float dot = Bf16Dot(x + r * w.cols, row, w.cols);
      float& out = y[r * y_stride + j];
      out = accumulate ? out + dot : dot;
    }
  }
}

}  // namespace

WeightMatrix WeightMatrix::Fp32(const float* data, int64_t rows, int64_t cols) {
  return {reinterpret_cast<const std::byte*>(data), DType::kF32, rows, cols};
}

void MatMulWeights(const float* x, int64_t rows, const WeightMatrix& w, float* y, int64_t y_stride,
                   bool accumulate) {
  if (rows == 0 || w.rows == 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  const bool aligned = reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
  if (w.dtype == DType::kF32 && aligned) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, w.rows, w.cols, 1.0f, x, w.cols,
                reinterpret_cast<const float*>(w.data), w.cols, beta, y, y_stride);
    return;
  }
  const bool aligned16 = reinterpret_cast<uintptr_t>(w.data) % alignof(uint16_t) == 0;
  if (w.dtype == DType::kBF16 && aligned16 && rows <= kFusedBf16Rows) {
    FusedBf16Product(x, rows, w, y, y_stride, accumulate);
    return;
  }
  thread_local std::vector<float> tile;
  tile.resize(kTileRows * w.cols);
  for (int64_t first = 0; first < w.rows; first += kTileRows) {
    const int64_t count = std::min(kTileRows, w.rows - first);
    WidenRows(w, first, count, tile.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, count, w.cols, 1.0f, x, w.cols,
                tile.data(), w.cols, beta, y + first, y_stride);
  }
}

void WeightRowToFloat(const WeightMatrix& w, int64_t row, float* out) {
  RIDGE_CHECK(row >= 0 && row < w.rows);
  const std::byte* src = w.data + row * w.cols * DTypeSize(w.dtype);
  for (int64_t i = 0; i < w.cols; ++i) {
    if (w.dtype == DType::kF32) {
      std::memcpy(&out[i], src + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = w.dtype == DType::kBF16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
    }
  }
}

}  // namespace ridge
