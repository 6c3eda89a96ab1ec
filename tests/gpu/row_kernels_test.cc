// The row kernels of the GPU forward pass (kernels/cuda/row_kernels.h) against the CPU's:
// greedy picks against GreedyToken (ties, NaN, infinities, rows where nothing beats -inf, rows
// of 1 to 151936 tokens with padded strides, more rows than a grid's y dimension holds) and
// RMSNorm against RmsNormRows (float4 and unaligned widths, gathered rows) and SwiGLU against
// SwiGluRows (widths a multiple of 4 or not, large inputs). Skips without a GPU.
#include "kernels/cuda/row_kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/half.h"
#include "kernels/elementwise.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kPadding = 1e30f;  // between rows; it would win if it were read

// Row `kind` of a test batch: random, tied, NaN-riddled, empty of anything above -inf, ...
std::vector<float> MakeRow(int kind, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int64_t> pick(0, cols - 1);
  std::vector<float> row(cols);
  for (float& v : row) v = normal(rng);
  switch (kind % 9) {
    case 0:  // random
      break;
    case 1:  // quantised: large groups of equal maxima
      for (float& v : row) v = std::round(v * 0.5f) * 2.0f;
      break;
    case 2:  // NaN here and there
      for (float& v : row) v = pick(rng) % 7 == 0 ? kNaN : v;
      row[pick(rng)] = kNaN;
      break;
    case 3:  // all NaN: nothing beats -inf, so 0
      for (float& v : row) v = kNaN;
      break;
    case 4:  // all -inf: 0
      for (float& v : row) v = -kInf;
      break;
    case 5:  // +inf twice: the lower index
      row[pick(rng)] = kInf;
      row[pick(rng)] = kInf;
      break;
    case 6:  // the maximum at the last index
      row[cols - 1] = 100.0f;
      break;
    case 7:  // equal maxima at 0 and the end
      row[0] = 50.0f;
      row[cols - 1] = 50.0f;
      break;
    case 8:  // -inf and NaN except one finite value
      for (float& v : row) v = pick(rng) % 2 == 0 ? kNaN : -kInf;
      row[pick(rng)] = -1e30f;
      break;
  }
  return row;
}

void CheckArgmax(int64_t rows, int64_t cols, int64_t stride) {
  SCOPED_TRACE("rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
  std::mt19937 rng(static_cast<uint32_t>(cols * 31 + rows));
  std::vector<float> logits(rows * stride, kPadding);
  std::vector<int32_t> expected(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row = MakeRow(static_cast<int>(r), cols, rng);
    std::copy(row.begin(), row.end(), logits.begin() + r * stride);
    expected[r] = GreedyToken(row);
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<int32_t> d_out(std::vector<int32_t>(rows, -1));
  ASSERT_EQ(LaunchArgmaxRows(d_logits.get(), rows, cols, stride, d_out.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> got = d_out.Download();
  int mismatches = 0;
  for (int64_t r = 0; r < rows && mismatches < 5; ++r) {
    if (got[r] != expected[r]) {
      ++mismatches;
      ADD_FAILURE() << "row " << r << " (kind " << r % 9 << "): " << got[r] << ", CPU "
                    << expected[r];
    }
  }
}

TEST(RowKernelsTest, ArgmaxPicksWhatGreedyTokenPicks) {
  SKIP_WITHOUT_GPU();
  for (int64_t cols : {1, 5, 1000, 4097, 50257, 151936}) {
    CheckArgmax(/*rows=*/27, cols, /*stride=*/(cols + 15) / 16 * 16 + 16);
  }
  CheckArgmax(/*rows=*/64, 50257, 50257);  // unpadded rows
}

TEST(RowKernelsTest, ArgmaxTakesMoreRowsThanOneGridColumn) {
  SKIP_WITHOUT_GPU();
  CheckArgmax(/*rows=*/70001, /*cols=*/9, /*stride=*/12);
}

// bf16 keeps 8 significant bits: rounding moves a value by at most 2^-9 of itself. Reports the
// first few elements further than twice that (plus `floor`) from the CPU's.
void ExpectBf16Near(const std::vector<uint16_t>& got, const std::vector<float>& expected,
                    float floor) {
  ASSERT_EQ(got.size(), expected.size());
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 5; ++i) {
    const float g = Bf16ToFloat(got[i]), e = expected[i];
    if (!(std::fabs(g - e) <= std::ldexp(std::fabs(e), -8) + floor)) {
      ++mismatches;
      ADD_FAILURE() << "element " << i << ": " << g << ", CPU " << e;
    }
  }
}

void CheckRmsNorm(int64_t rows, int64_t cols, bool gathered) {
  SCOPED_TRACE("rows " + std::to_string(rows) + ", cols " + std::to_string(cols) +
               (gathered ? ", gathered" : ""));
  std::mt19937 rng(static_cast<uint32_t>(rows * 7 + cols));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t in_rows = rows + 3;
  std::vector<float> in(in_rows * cols), weight(cols);
  for (float& v : in) v = normal(rng);
  for (float& v : weight) v = 1.0f + 0.3f * normal(rng);
  std::vector<int32_t> index(rows);
  for (int64_t r = 0; r < rows; ++r)
    index[r] = static_cast<int32_t>(gathered ? in_rows - 1 - r : r);
  constexpr float kEps = 1e-6f;
  std::vector<float> expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    RmsNormRows(in.data() + index[r] * cols, weight.data(), 1, static_cast<int>(cols), kEps,
                expected.data() + r * cols);
  }
  DeviceArray<float> d_in(in), d_weight(weight);
  DeviceArray<int32_t> d_index(index);
  DeviceArray<uint16_t> d_out(std::vector<uint16_t>(rows * cols, 0xffff));
  ASSERT_EQ(LaunchRmsNormToBf16(d_in.get(), gathered ? d_index.get() : nullptr, d_weight.get(),
                                rows, cols, kEps, d_out.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectBf16Near(d_out.Download(), expected, 1e-7f);
}

TEST(RowKernelsTest, RmsNormMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t cols : {64, 768, 770, 2048, 4100}) {
    for (int64_t rows : {1, 9, 64}) {
      CheckRmsNorm(rows, cols, /*gathered=*/false);
      CheckRmsNorm(rows, cols, /*gathered=*/true);
    }
  }
}

void CheckSwiGlu(int64_t rows, int64_t inter) {
  SCOPED_TRACE("rows " + std::to_string(rows) + ", inter " + std::to_string(inter));
  std::mt19937 rng(static_cast<uint32_t>(rows * 13 + inter));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> in(rows * 2 * inter);
  for (float& v : in) v = normal(rng);
  in[0] = -200.0f;  // silu underflows to -0 rather than NaN
  in[inter - 1] = 200.0f;
  std::vector<float> expected(rows * inter);
  SwiGluRows(in.data(), rows, static_cast<int>(inter), expected.data());
  DeviceArray<float> d_in(in);
  DeviceArray<uint16_t> d_out(std::vector<uint16_t>(rows * inter, 0xffff));
  ASSERT_EQ(LaunchSwiGlu(d_in.get(), rows, inter, d_out.get(), nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectBf16Near(d_out.Download(), expected, 1e-6f);  // the fast exp's few ulps: a wider floor
}

TEST(RowKernelsTest, SwiGluMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t inter : {4, 6, 768, 1001, 4096}) {
    for (int64_t rows : {1, 9, 257}) CheckSwiGlu(rows, inter);
  }
}

}  // namespace
}  // namespace ridge::cuda
