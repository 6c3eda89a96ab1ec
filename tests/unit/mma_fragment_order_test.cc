// The fragment order of the chunked prefill's tensor-core operands (kernels/mma_fragment_order.h),
// checked without a GPU: every element gets its own offset, and the element a lane finds at a
// fragment slot is the one the PTX ISA's m16n8k8 .tf32 (and m16n8k16 .f16) fragment tables put
// there.
#include "kernels/mma_fragment_order.h"

#include <gtest/gtest.h>

#include <ostream>
#include <vector>

namespace ridge {
namespace {

struct Shape {
  int rows, cols;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.rows << "x" << s.cols; }

class FragmentOrderTest : public ::testing::TestWithParam<Shape> {};

// Every element of a rows x cols operand gets its own offset in [0, rows * cols).
template <typename Offset>
void ExpectBijection(int rows, int cols, Offset offset) {
  std::vector<int> hits(rows * cols, 0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int at = offset(r, c, cols);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, rows * cols) << r << "," << c;
      ++hits[at];
    }
  }
  for (int i = 0; i < rows * cols; ++i) ASSERT_EQ(hits[i], 1) << "offset " << i;
}

TEST_P(FragmentOrderTest, AOffsetsAreABijection) {
  ExpectBijection(GetParam().rows, GetParam().cols, APermOffset);
}

TEST_P(FragmentOrderTest, BOffsetsAreABijection) {
  ExpectBijection(GetParam().rows, GetParam().cols, BPermOffset);
}

// Lane l of the warp loading tile (tile_row, tile_col) reads 4 consecutive floats (A) or 2 (B)
// at (tile index * 32 + l) * width; they must be the PTX fragment's elements in order.
TEST_P(FragmentOrderTest, LanesReadThePtxFragments) {
  const auto [rows, cols] = GetParam();
  for (int tile_row = 0; tile_row < rows / 16; ++tile_row) {
    for (int tile_col = 0; tile_col < cols / 8; ++tile_col) {
      const int tile = tile_row * (cols / 8) + tile_col;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, q = lane % 4, r = 16 * tile_row, c = 8 * tile_col;
        const int base = (tile * 32 + lane) * 4;
        EXPECT_EQ(APermOffset(r + g, c + q, cols), base + 0);
        EXPECT_EQ(APermOffset(r + g + 8, c + q, cols), base + 1);
        EXPECT_EQ(APermOffset(r + g, c + q + 4, cols), base + 2);
        EXPECT_EQ(APermOffset(r + g + 8, c + q + 4, cols), base + 3);
      }
    }
  }
  for (int tile_row = 0; tile_row < rows / 8; ++tile_row) {
    for (int tile_col = 0; tile_col < cols / 8; ++tile_col) {
      const int tile = tile_row * (cols / 8) + tile_col;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, q = lane % 4, k = 8 * tile_row, n = 8 * tile_col;
        const int base = (tile * 32 + lane) * 2;
        EXPECT_EQ(BPermOffset(k + q, n + g, cols), base + 0);
        EXPECT_EQ(BPermOffset(k + q + 4, n + g, cols), base + 1);
      }
    }
  }
}

TEST_P(FragmentOrderTest, HalfAOffsetsAreABijection) {
  ExpectBijection(GetParam().rows, GetParam().cols, AHalfOffset);
}

TEST_P(FragmentOrderTest, HalfBOffsetsAreABijection) {
  ExpectBijection(GetParam().rows, GetParam().cols, BHalfOffset);
}

// Lane l of the warp loading a 16 x 16 A tile reads 8 consecutive halves at (tile * 32 + l) * 8,
// and of a 16 x 8 B tile 4 at (tile * 32 + l) * 4: the f16 fragments' elements in order.
TEST_P(FragmentOrderTest, LanesReadThePtxHalfFragments) {
  const auto [rows, cols] = GetParam();
  for (int tile_row = 0; tile_row < rows / 16; ++tile_row) {
    for (int tile_col = 0; tile_col < cols / 16; ++tile_col) {
      const int tile = tile_row * (cols / 16) + tile_col;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, q = lane % 4, r = 16 * tile_row, c = 16 * tile_col;
        const int base = (tile * 32 + lane) * 8;
        for (int h = 0; h < 2; ++h) {
          EXPECT_EQ(AHalfOffset(r + g, c + 2 * q + h, cols), base + 0 + h);
          EXPECT_EQ(AHalfOffset(r + g + 8, c + 2 * q + h, cols), base + 2 + h);
          EXPECT_EQ(AHalfOffset(r + g, c + 2 * q + 8 + h, cols), base + 4 + h);
          EXPECT_EQ(AHalfOffset(r + g + 8, c + 2 * q + 8 + h, cols), base + 6 + h);
        }
      }
    }
  }
  for (int tile_row = 0; tile_row < rows / 16; ++tile_row) {
    for (int tile_col = 0; tile_col < cols / 8; ++tile_col) {
      const int tile = tile_row * (cols / 8) + tile_col;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, q = lane % 4, k = 16 * tile_row, n = 8 * tile_col;
        const int base = (tile * 32 + lane) * 4;
        for (int h = 0; h < 2; ++h) {
          EXPECT_EQ(BHalfOffset(k + 2 * q + h, n + g, cols), base + 0 + h);
          EXPECT_EQ(BHalfOffset(k + 2 * q + 8 + h, n + g, cols), base + 2 + h);
        }
      }
    }
  }
}

// Word w of an f16 B operand holds the elements BHalfWordElement names: (k, n) at half 2w and
// (k + 1, n) at 2w + 1.
TEST_P(FragmentOrderTest, HalfBWordElementInvertsTheOffset) {
  const auto [rows, cols] = GetParam();
  for (int word = 0; word < rows * cols / 2; ++word) {
    const OperandElement e = BHalfWordElement(word, cols);
    EXPECT_EQ(BHalfOffset(e.k, e.n, cols), 2 * word) << word;
    EXPECT_EQ(BHalfOffset(e.k + 1, e.n, cols), 2 * word + 1) << word;
  }
}

// The paired order gives every word its own place, and lane l's 16 bytes of pair m of a row of
// tiles hold its m16n8k16 B fragment (b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]) of tile 2m,
// then of tile 2m + 1.
TEST_P(FragmentOrderTest, HalfBPairedWordsHoldEachPairOfTilesFragments) {
  const auto [rows, cols] = GetParam();
  std::vector<int> hits(rows * cols / 2, 0);
  for (int k = 0; k < rows; k += 2) {
    for (int n = 0; n < cols; ++n) {
      const int at = BHalfPairedWord(k, n, cols);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, rows * cols / 2);
      ++hits[at];
    }
  }
  for (const int h : hits) EXPECT_EQ(h, 1);
  for (int tile_row = 0; tile_row < rows / 16; ++tile_row) {
    for (int pair = 0; pair < cols / 16; ++pair) {
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, q = lane % 4, k = 16 * tile_row;
        const int base = ((tile_row * (cols / 16) + pair) * 32 + lane) * 4;
        for (int second = 0; second < 2; ++second) {
          const int n = 8 * (2 * pair + second) + g;
          EXPECT_EQ(BHalfPairedWord(k + 2 * q, n, cols), base + 2 * second);
          EXPECT_EQ(BHalfPairedWord(k + 2 * q + 8, n, cols), base + 2 * second + 1);
        }
      }
    }
  }
}

// The offset of (r, c) splits over the bits of c (the solve adds a thread's base offset to a
// constant per column it owns).
TEST_P(FragmentOrderTest, HalfAOffsetsAddOverTheBitsOfTheColumn) {
  const auto [rows, cols] = GetParam();
  for (const int mask : {3, 7, 15}) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        EXPECT_EQ(AHalfOffset(r, c, cols),
                  AHalfOffset(r, c & mask, cols) + AHalfOffset(0, c & ~mask, cols));
      }
    }
  }
}

// The solve's operands: P and X (64 x D), the chunk states (D x D), K^T (D x 64), K and V
// (64 x D), the weighted P K^T (64 x 64), at head dims 64 and 128.
INSTANTIATE_TEST_SUITE_P(PrefillOperands, FragmentOrderTest,
                         ::testing::Values(Shape{64, 64}, Shape{64, 128}, Shape{128, 64},
                                           Shape{128, 128}));

}  // namespace
}  // namespace ridge
