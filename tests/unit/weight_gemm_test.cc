// Products with weights in their checkpoint dtype (kernels/weight_gemm.h) against a float64
// product of the same values: fp32 (BLAS directly), bf16 with few rows (widened in registers)
// and with more rows (widened a tile at a time), f16, storing and accumulating into a column
// range of a wider output.
#include "kernels/weight_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/half.h"

namespace ridge {
namespace {

void Check(DType dtype, int64_t rows, int64_t out, int64_t in, bool accumulate) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 1000 + out * 10 + in));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), w(out * in);
  for (float& v : x) v = normal(rng);
  std::vector<uint16_t> half(out * in);
  for (int64_t i = 0; i < out * in; ++i) {
    if (dtype == DType::kBF16) {
      half[i] = FloatToBf16(normal(rng));
      w[i] = Bf16ToFloat(half[i]);
    } else if (dtype == DType::kF16) {
      const float value = normal(rng);
      // A value f16 holds exactly: the product then sees the same number.
      w[i] = std::ldexp(std::round(std::ldexp(value, 8)), -8);
      const uint32_t sign = w[i] < 0 ? 0x8000u : 0u;
      const float magnitude = std::fabs(w[i]);
      int exponent = 0;
      const float mantissa =
          std::frexp(magnitude, &exponent);  // magnitude = m * 2^e, m in [0.5, 1)
      half[i] =
          magnitude == 0.0f
              ? static_cast<uint16_t>(sign)
              : static_cast<uint16_t>(sign | ((exponent + 14) << 10) |
                                      (static_cast<uint32_t>(std::ldexp(mantissa, 11)) & 0x3ff));
      w[i] = F16ToFloat(half[i]);
    } else {
      w[i] = normal(rng);
    }
  }
  const auto* bytes = dtype == DType::kF32 ? reinterpret_cast<const std::byte*>(w.data())
                                           : reinterpret_cast<const std::byte*>(half.data());
  const WeightMatrix matrix{bytes, dtype, out, in};
  const int64_t stride = out + 3;  // the product fills columns [2, 2 + out) of each row
  std::vector<float> y(rows * stride, 0.5f);
  MatMulWeights(x.data(), rows, matrix, y.data() + 2, stride, accumulate);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(y[r * stride], 0.5f);
    EXPECT_EQ(y[r * stride + 2 + out], 0.5f);
    for (int64_t j = 0; j < out; ++j) {
      double want = accumulate ? 0.5 : 0.0;
      for (int64_t k = 0; k < in; ++k) want += double(x[r * in + k]) * w[j * in + k];
      ASSERT_NEAR(y[r * stride + 2 + j], want, 1e-4 * std::sqrt(double(in)) + 1e-5)
          << DTypeName(dtype) << " rows " << rows << " out " << out << " in " << in;
    }
  }
}

TEST(WeightGemmTest, EveryDtypeAndRowCountMatchesAFloat64Product) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const int64_t rows : {1, 3, 8, 9, 70}) {
      for (const auto& [out, in] : {std::pair<int64_t, int64_t>{5, 7}, {130, 64}, {64, 203}}) {
        for (const bool accumulate : {false, true}) Check(dtype, rows, out, in, accumulate);
      }
    }
  }
}

TEST(WeightGemmTest, EmbeddingRows) {
  std::vector<uint16_t> half = {FloatToBf16(1.0f), FloatToBf16(2.0f), FloatToBf16(-3.0f),
                                FloatToBf16(0.5f), FloatToBf16(8.0f), FloatToBf16(-1.0f)};
  const WeightMatrix matrix{reinterpret_cast<const std::byte*>(half.data()), DType::kBF16, 3, 2};
  float row[2];
  WeightRowToFloat(matrix, 2, row);
  EXPECT_EQ(row[0], 8.0f);
  EXPECT_EQ(row[1], -1.0f);
  WeightRowToFloat(matrix, 1, row);
  EXPECT_EQ(row[0], -3.0f);
  EXPECT_EQ(row[1], 0.5f);
}

}  // namespace
}  // namespace ridge
