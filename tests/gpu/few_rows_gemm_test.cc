// The few-rows product of decode steps (kernels/cuda/few_rows_gemm.h) against a float64 product
// of the same bf16 values: 1 to 32 rows, widths that are and are not multiples of 8 and 16, k
// from one block of 32 to the largest taken (in rounds where the warps cannot take it at once),
// storing and accumulating, with blocks of 8 and of 16 columns. Which sizes it takes is host code
// and runs everywhere; the rest skips without a GPU.
#include "kernels/cuda/few_rows_gemm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

std::vector<uint16_t> RandomBf16(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (uint16_t& x : v) x = FloatToBf16(normal(rng));
  return v;
}

TEST(FewRowsGemmTest, TakesFewRowsAndWholeBlocksOfK) {
  EXPECT_TRUE(FewRowsGemmSupports(1, 1, 32));
  EXPECT_TRUE(FewRowsGemmSupports(16, 50272, 768));
  EXPECT_TRUE(FewRowsGemmSupports(16, 768, 4096));
  EXPECT_TRUE(FewRowsGemmSupports(32, 768, 4096));
  EXPECT_FALSE(FewRowsGemmSupports(0, 768, 768));
  EXPECT_FALSE(FewRowsGemmSupports(33, 768, 768));
  EXPECT_FALSE(FewRowsGemmSupports(1, 0, 768));
  EXPECT_FALSE(FewRowsGemmSupports(1, 768, 0));
  EXPECT_FALSE(FewRowsGemmSupports(1, 768, 48));
  EXPECT_FALSE(FewRowsGemmSupports(1, 768, 4128));
}

struct Case {
  int rows, n, k;
  bool accumulate;
};

class FewRowsGemmGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(FewRowsGemmGpuTest, MatchesAFloat64Product) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  std::mt19937 rng(c.rows * 7919 + c.n * 31 + c.k);
  const std::vector<uint16_t> x = RandomBf16(static_cast<int64_t>(c.rows) * c.k, rng);
  const std::vector<uint16_t> w = RandomBf16(static_cast<int64_t>(c.n) * c.k, rng);
  const int stride = c.n + 3;  // odd padding between output rows, which must stay untouched
  std::vector<float> y(static_cast<size_t>(c.rows) * stride);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : y) v = normal(rng);
  std::vector<double> want(y.size()), magnitude(y.size());
  for (int r = 0; r < c.rows; ++r) {
    for (int col = 0; col < c.n; ++col) {
      const size_t at = static_cast<size_t>(r) * stride + col;
      double sum = c.accumulate ? y[at] : 0.0, size = std::fabs(sum);
      for (int i = 0; i < c.k; ++i) {
        const double term = static_cast<double>(Bf16ToFloat(x[static_cast<size_t>(r) * c.k + i])) *
                            Bf16ToFloat(w[static_cast<size_t>(col) * c.k + i]);
        sum += term;
        size += std::fabs(term);
      }
      want[at] = sum;
      magnitude[at] = size;
    }
  }
  DeviceArray<uint16_t> dx(x), dw(w);
  for (const int n_tiles : {0, 1, 2}) {  // 0: LaunchFewRowsGemm's choice
    SCOPED_TRACE("n_tiles " + std::to_string(n_tiles));
    DeviceArray<float> dy(y);
    const FewRowsGemmArgs args{dx.get(), dw.get(), dy.get(), c.rows,
                               c.n,      c.k,      stride,   c.accumulate};
    ASSERT_EQ(n_tiles == 0 ? LaunchFewRowsGemm(args, /*sm_count=*/132, nullptr)
                           : LaunchFewRowsGemmTiles(args, n_tiles, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = dy.Download();
    double worst = 0.0;
    for (int r = 0; r < c.rows; ++r) {
      for (int col = 0; col < stride; ++col) {
        const size_t at = static_cast<size_t>(r) * stride + col;
        if (col >= c.n) {
          ASSERT_EQ(got[at], y[at]) << "padding written at row " << r << " column " << col;
          continue;
        }
        // fp32 accumulation in another order: a few ulps of the sum of magnitudes.
        const double error = std::fabs(got[at] - want[at]) / (magnitude[at] + 1e-30);
        worst = std::max(worst, error);
        ASSERT_LT(error, 3e-5) << "row " << r << " column " << col << ": " << got[at] << " vs "
                               << want[at];
      }
    }
    std::printf("rows %d n %d k %d%s, n-tiles %d: worst error %.2e of the magnitudes\n", c.rows,
                c.n, c.k, c.accumulate ? " accumulate" : "", n_tiles, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FewRowsGemmGpuTest,
                         ::testing::Values(Case{1, 8, 32, false}, Case{1, 13, 96, true},
                                           Case{3, 2320, 768, false}, Case{7, 768, 768, true},
                                           Case{8, 100, 2048, false}, Case{9, 768, 2048, true},
                                           Case{16, 4096, 768, false}, Case{16, 21, 4096, true},
                                           Case{5, 1, 256, false}, Case{12, 50272, 768, false},
                                           Case{17, 768, 768, true}, Case{32, 2320, 768, false},
                                           Case{24, 100, 2048, true}, Case{32, 4096, 768, false},
                                           Case{29, 768, 2048, true}, Case{32, 13, 4096, false},
                                           Case{31, 2320, 96, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           char name[64];
                           std::snprintf(name, sizeof(name), "r%d_n%d_k%d%s", c.rows, c.n, c.k,
                                         c.accumulate ? "_acc" : "");
                           return std::string(name);
                         });

TEST(FewRowsGemmGpuTest, RefusesSizesItDoesNotTake) {
  SKIP_WITHOUT_GPU();
  const FewRowsGemmArgs args{nullptr, nullptr, nullptr, 33, 8, 32, 8, false};
  EXPECT_EQ(LaunchFewRowsGemm(args, 132, nullptr), cudaErrorInvalidValue);
  const FewRowsGemmArgs three_tiles{nullptr, nullptr, nullptr, 8, 8, 32, 8, false};
  EXPECT_EQ(LaunchFewRowsGemmTiles(three_tiles, 3, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ridge::cuda
